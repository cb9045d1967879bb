#!/usr/bin/env python3
"""The MLP of `depengine train` (784-256-10, ReLU, softmax cross-entropy, minibatch SGD,
lr 0.1 times 0.8 per epoch, batch 256) in PyTorch eager on the CPU, written as a PyTorch user
would: nn.Linear layers, F.cross_entropy, loss.backward(), torch.optim.SGD. Data loading,
initialization (same RNG draws, so the same initial weights and shuffles) and printed
columns are those of mlp_numpy.py and mlp_mxnet.py.

    bash bench/peers/setup-torch.sh          # once: build/torch-venv with torch 2.5.1
    build/torch-venv/bin/python bench/peers/mlp_torch.py --epochs 3 [--model softmax] [--threads 2]

--threads is torch.set_num_threads (default: the cores). Loss and accuracy are accumulated
as tensors and read once per epoch, as in mlp_mxnet.py (PyTorch on the CPU computes each op
when it is called, so this saves only the conversions).
"""
import os
import sys
import time

import numpy as np

import fashion_mnist_data as data

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except Exception as e:  # ImportError, OSError (a missing CUDA library of the wheel)
    sys.stderr.write(f"mlp_torch: cannot import torch ({type(e).__name__}: {e}); run "
                     f"bash bench/peers/setup-torch.sh and use build/torch-venv/bin/python\n")
    sys.exit(2)


def main():
    a = data.parse_args()
    torch.set_num_threads(a.threads)

    xtr, ytr = data.load("train", "mlp_torch")
    xte, yte = data.load("test", "mlp_torch")
    xte_t = torch.from_numpy(data.normalize(xte))
    yte_t = torch.from_numpy(yte.astype(np.int64))
    rng = np.random.default_rng(a.seed)
    # The draws of mlp_numpy.py, transposed to nn.Linear's (out, in) layout.
    init = data.initial_weights(a.model, rng)
    if a.model == "softmax":
        layers = [nn.Linear(784, 10)]
    else:
        layers = [nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)]
    model = nn.Sequential(*layers)
    linears = [m for m in layers if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for lin, (w, b) in zip(linears, zip(init[0::2], init[1::2])):
            lin.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T)))
            lin.bias.copy_(torch.from_numpy(b))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)

    print(f"torch {torch.__version__} eager, CPU, {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} cores, model {a.model}, batch {a.batch}")
    print(data.header())
    n = len(ytr)
    for epoch in range(a.epochs):
        for g in opt.param_groups:
            g["lr"] = a.lr * a.lr_decay ** epoch
        t0 = time.perf_counter()
        order = rng.permutation(n)
        loss_sum = torch.zeros(())
        correct = torch.zeros((), dtype=torch.int64)
        for start in range(0, n, a.batch):
            idx = order[start:start + a.batch]
            x = torch.from_numpy(data.normalize(xtr[idx]))
            y = torch.from_numpy(ytr[idx].astype(np.int64))
            z = model(x)
            nll = F.cross_entropy(z, y, reduction="none")
            loss = nll.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                loss_sum += nll.sum()
                correct += (z.argmax(dim=1) == y).sum()
        loss_total, correct_total = float(loss_sum), float(correct)
        secs = time.perf_counter() - t0
        with torch.no_grad():
            test_acc = float((model(xte_t).argmax(dim=1) == yte_t).double().mean())
        print(data.epoch_line(epoch + 1, loss_total / n, correct_total / n, test_acc, n / secs,
                              secs))


if __name__ == "__main__":
    main()
