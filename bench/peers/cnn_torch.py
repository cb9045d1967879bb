#!/usr/bin/env python3
"""The CNN of issue 25 (the second source's `Net`) in PyTorch eager on the CPU: conv 3x3
1->32, ReLU, conv 3x3 32->64, ReLU, max-pool 2, dropout 0.25, flatten (9216), dense 128,
ReLU, dropout 0.5, dense 10, log-softmax, NLL; batch 64; Adam 1e-3 (or Adadelta 1.0).

    bash bench/peers/setup-torch.sh          # once: build/torch-venv with torch 2.5.1
    build/torch-venv/bin/python bench/peers/cnn_torch.py --limit 12000 [--sleep-ms 5]
    build/torch-venv/bin/python bench/peers/cnn_torch.py --device cuda   # tools/gpu-check.sh

The training slice and its order (those of `depengine train --limit`), the test slice and
the initial weights are those of fashion_mnist_data.py, shared with cnn_mxnet.py; each batch
is gathered from the host arrays in the loop, as a DataLoader over an in-memory data set does. Each batch's loss is read two batches later,
as a loop that logs it would (here PyTorch has finished it long before). Prints per epoch the
loss, test accuracy, examples/s, wall time and utilization (process CPU time / (wall x
cores), training loop only), then one RESULT line of JSON for cnn_side_by_side.py.
--cpu-trace FILE.json also writes the process CPU time sampled every 50 ms over the last
epoch (fashion_mnist_data.CpuSampler), which docs/training/plot_utilization.py plots as
utilization over time beside depengine's compute lane.
"""
import collections
import contextlib
import os
import sys
import time

import fashion_mnist_data as data

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except Exception as e:  # ImportError, OSError (a missing CUDA library of the wheel)
    sys.stderr.write(f"cnn_torch: cannot import torch ({type(e).__name__}: {e}); run "
                     f"bash bench/peers/setup-torch.sh and use build/torch-venv/bin/python\n")
    sys.exit(2)


class Net(nn.Module):
    """The second source's network (PyTorch's examples/mnist)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def main():
    a = data.cnn_parse_args("cnn_torch", lambda p: p.add_argument(
        "--device", choices=["cpu", "cuda"], default="cpu",
        help="cuda: the model and each batch on torch.device('cuda', 0)"))
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("cnn_torch: --device cuda: torch.cuda.is_available() is False")
    dev = torch.device("cuda", 0) if a.device == "cuda" else torch.device("cpu")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)  # the dropout masks

    xtr, ytr = data.cnn_train_slice(a.limit, "cnn_torch")
    xte, yte = (torch.from_numpy(v).to(dev)
                for v in data.cnn_test_slice(a.test_limit, "cnn_torch"))
    model = Net()
    weights = data.cnn_initial_weights(a.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[name]))
    model.to(dev)
    if a.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    else:
        opt = torch.optim.Adadelta(model.parameters(), lr=a.lr)

    where = torch.cuda.get_device_name(0) if a.device == "cuda" else "CPU"
    print(f"torch {torch.__version__} eager, {where}, {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} cores, oneDNN {torch.backends.mkldnn.is_available()}; "
          f"{a.limit} examples, batch {a.batch}, {a.optimizer} lr {a.lr:g}, "
          f"sleep {a.sleep_ms:g} ms per batch", flush=True)
    meter = data.Meter()
    n = len(ytr)
    loss = 0.0
    for epoch in range(a.epochs):
        model.train()
        order = data.train_order(a.seed, n, epoch)
        epoch_meter = data.Meter()
        loss_sum = 0.0
        pending = collections.deque()
        sampler = data.CpuSampler(a.cpu_sample_ms)
        with meter, epoch_meter, sampler if a.cpu_trace else contextlib.nullcontext():
            for start in range(0, n, a.batch):
                idx = order[start:start + a.batch]
                x = torch.from_numpy(xtr[idx]).to(dev, non_blocking=True)
                y = torch.from_numpy(ytr[idx]).to(dev, non_blocking=True)
                opt.zero_grad()
                batch_loss = F.nll_loss(model(x), y)
                batch_loss.backward()
                opt.step()
                pending.append((batch_loss.detach(), len(y)))
                if len(pending) > 2:
                    l, m = pending.popleft()
                    loss_sum += l.item() * m
                if a.sleep_ms:
                    time.sleep(a.sleep_ms / 1000)
            loss_sum += sum(l.item() * m for l, m in pending)
        loss = loss_sum / n
        test_acc = evaluate(model, xte, yte)
        print(data.cnn_epoch_line(epoch + 1, loss, test_acc, n / epoch_meter.wall,
                                  epoch_meter.wall,
                                  epoch_meter.cpu / (epoch_meter.wall * (os.cpu_count() or 1))),
              flush=True)
    if a.cpu_trace:
        sampler.write(a.cpu_trace, "torch eager")
    data.cnn_result("torch eager", a, n * a.epochs, meter, loss, test_acc)


def evaluate(model, x, y):
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(y), 1000):
            pred = model(x[start:start + 1000]).argmax(dim=1)
            correct += int((pred == y[start:start + 1000]).sum())
    return correct / len(y)


if __name__ == "__main__":
    main()
