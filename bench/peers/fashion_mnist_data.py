"""What the Python MLP peers (mlp_numpy.py, mlp_mxnet.py) share with each other: the
Fashion-MNIST IDX files of Debian's dataset-fashion-mnist, the normalization of
`depengine train`, the initial weights (one seeded NumPy draw, so both peers start from the
same weights), and the command line."""
import argparse
import gzip
import os
import struct
import sys

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def read_idx(path, magic, ndim, who):
    if not os.path.exists(path):
        sys.exit(f"{who}: {path} not found (install dataset-fashion-mnist)")
    with gzip.open(path, "rb") as f:
        data = f.read()
    got = struct.unpack(">I", data[:4])[0]
    if got != magic:
        sys.exit(f"{who}: {path}: wrong magic 0x{got:08x}")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        sys.exit(f"{who}: {path}: truncated or too long")
    return body.reshape(dims)


def load(split, who):
    """(images as uint8 rows of 784, labels) of the "train" or "test" split."""
    prefix = os.path.join(DATA, "train" if split == "train" else "t10k")
    x = read_idx(prefix + "-images-idx3-ubyte.gz", 0x803, 3, who).reshape(-1, 784)
    y = read_idx(prefix + "-labels-idx1-ubyte.gz", 0x801, 1, who)
    return x, y


def normalize(x_u8):
    return (x_u8.astype(np.float32) / 255.0 - MEAN) / STD


def initial_weights(model, rng):
    """Weights in (in, out) layout and zero biases: He-scaled normal for the hidden layer,
    N(0, 0.01) for the output layer."""
    f32 = np.float32
    if model == "mlp":
        return [rng.normal(0, np.sqrt(2 / 784), (784, 256)).astype(f32), np.zeros(256, f32),
                rng.normal(0, 0.01, (256, 10)).astype(f32), np.zeros(10, f32)]
    return [rng.normal(0, 0.01, (784, 10)).astype(f32), np.zeros(10, f32)]


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "softmax"], default="mlp")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--lr-decay", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args()


def header():
    return (f"{'epoch':>5} {'loss':>8} {'train acc':>9} {'test acc':>9} {'examples/s':>10} "
            f"{'epoch s':>10}")


def epoch_line(epoch, loss, train_acc, test_acc, examples_per_s, secs):
    return (f"{epoch:5d} {loss:8.4f} {100 * train_acc:8.2f}% {100 * test_acc:8.2f}% "
            f"{examples_per_s:10.0f} {secs:10.2f}")
