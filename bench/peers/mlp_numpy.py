#!/usr/bin/python3
"""The MLP of `depengine train` (784-256-10, ReLU, softmax cross-entropy, minibatch SGD,
lr 0.1 times 0.8 per epoch) in NumPy: synchronous, each step's batch assembly and
normalization done in line, over the same OpenBLAS (Debian's python3-numpy links
libblas.so.3, which is OpenBLAS here, on all cores).

    /usr/bin/python3 bench/peers/mlp_numpy.py --epochs 3 [--model softmax] [--batch 256]

Prints per epoch: loss, train and test accuracy, examples/s and epoch time (training only),
the columns of `depengine train` that NumPy can measure.
"""
import os
import time

import numpy as np

import fashion_mnist_data as data


def main():
    a = data.parse_args()

    xtr, ytr = data.load("train", "mlp_numpy")
    xte, yte = data.load("test", "mlp_numpy")
    xte_f = data.normalize(xte)
    rng = np.random.default_rng(a.seed)
    params = data.initial_weights(a.model, rng)

    def forward(x):
        if a.model == "softmax":
            return None, x @ params[0] + params[1]
        h = np.maximum(x @ params[0] + params[1], 0)
        return h, h @ params[2] + params[3]

    print(f"numpy {np.__version__}, {os.cpu_count()} cores, model {a.model}, batch {a.batch}")
    print(data.header())
    n = len(ytr)
    for epoch in range(a.epochs):
        lr = a.lr * a.lr_decay ** epoch
        t0 = time.perf_counter()
        order = rng.permutation(n)
        loss_sum = correct = 0.0
        for start in range(0, n, a.batch):
            idx = order[start:start + a.batch]
            x, y = data.normalize(xtr[idx]), ytr[idx]
            m = len(y)
            h, z = forward(x)
            z = z - z.max(axis=1, keepdims=True)
            e = np.exp(z)
            s = e.sum(axis=1, keepdims=True)
            loss_sum += float((np.log(s[:, 0]) - z[np.arange(m), y]).sum())
            correct += float((z.argmax(axis=1) == y).sum())
            dz = e / s
            dz[np.arange(m), y] -= 1
            dz /= m
            if a.model == "softmax":
                grads = [x.T @ dz, dz.sum(axis=0)]
            else:
                dz1 = (dz @ params[2].T) * (h > 0)
                grads = [x.T @ dz1, dz1.sum(axis=0), h.T @ dz, dz.sum(axis=0)]
            for w, g in zip(params, grads):
                w -= lr * g
        secs = time.perf_counter() - t0
        test_acc = float((forward(xte_f)[1].argmax(axis=1) == yte).mean())
        print(data.epoch_line(epoch + 1, loss_sum / n, correct / n, test_acc, n / secs, secs))


if __name__ == "__main__":
    main()
