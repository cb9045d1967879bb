#!/usr/bin/python3
"""The MLP of `depengine train` (784-256-10, ReLU, softmax cross-entropy, minibatch SGD,
lr 0.1 times 0.8 per epoch) in NumPy: synchronous, each step's batch assembly and
normalization done in line, over the same OpenBLAS (Debian's python3-numpy links
libblas.so.3, which is OpenBLAS here, on all cores).

    /usr/bin/python3 bench/peers/mlp_numpy.py --epochs 3 [--model softmax] [--batch 256]

Prints per epoch: loss, train and test accuracy, examples/s and epoch time (training only),
the columns of `depengine train` that NumPy can measure.
"""
import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def read_idx(path, magic, ndim):
    if not os.path.exists(path):
        sys.exit(f"mlp_numpy: {path} not found (install dataset-fashion-mnist)")
    with gzip.open(path, "rb") as f:
        data = f.read()
    got = struct.unpack(">I", data[:4])[0]
    if got != magic:
        sys.exit(f"mlp_numpy: {path}: wrong magic 0x{got:08x}")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        sys.exit(f"mlp_numpy: {path}: truncated or too long")
    return body.reshape(dims)


def load(split):
    prefix = os.path.join(DATA, "train" if split == "train" else "t10k")
    x = read_idx(prefix + "-images-idx3-ubyte.gz", 0x803, 3).reshape(-1, 784)
    y = read_idx(prefix + "-labels-idx1-ubyte.gz", 0x801, 1)
    return x, y


def normalize(x_u8):
    return (x_u8.astype(np.float32) / 255.0 - MEAN) / STD


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "softmax"], default="mlp")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--lr-decay", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()

    xtr, ytr = load("train")
    xte, yte = load("test")
    xte_f = normalize(xte)
    rng = np.random.default_rng(a.seed)
    f32 = np.float32
    if a.model == "mlp":
        params = [rng.normal(0, np.sqrt(2 / 784), (784, 256)).astype(f32), np.zeros(256, f32),
                  rng.normal(0, 0.01, (256, 10)).astype(f32), np.zeros(10, f32)]
    else:
        params = [rng.normal(0, 0.01, (784, 10)).astype(f32), np.zeros(10, f32)]

    def forward(x):
        if a.model == "softmax":
            return None, x @ params[0] + params[1]
        h = np.maximum(x @ params[0] + params[1], 0)
        return h, h @ params[2] + params[3]

    print(f"numpy {np.__version__}, {os.cpu_count()} cores, model {a.model}, batch {a.batch}")
    print(f"{'epoch':>5} {'loss':>8} {'train acc':>9} {'test acc':>9} {'examples/s':>10} "
          f"{'epoch s':>10}")
    n = len(ytr)
    for epoch in range(a.epochs):
        lr = a.lr * a.lr_decay ** epoch
        t0 = time.perf_counter()
        order = rng.permutation(n)
        loss_sum = correct = 0.0
        for start in range(0, n, a.batch):
            idx = order[start:start + a.batch]
            x, y = normalize(xtr[idx]), ytr[idx]
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
        print(f"{epoch + 1:5d} {loss_sum / n:8.4f} {100 * correct / n:8.2f}% "
              f"{100 * test_acc:8.2f}% {n / secs:10.0f} {secs:10.2f}")


if __name__ == "__main__":
    main()
