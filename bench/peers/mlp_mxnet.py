#!/usr/bin/env python3
"""The MLP of `depengine train` (784-256-10, ReLU, softmax cross-entropy, minibatch SGD,
lr 0.1 times 0.8 per epoch) in Apache MXNet 1.9.1, written as an MXNet user would with the
imperative NDArray API on the CPU: FullyConnected/relu/log_softmax, autograd
(attach_grad, autograd.record, backward) and sgd_update in place. Every call is pushed
to MXNet's dependency engine asynchronously; loss and accuracy are accumulated as NDArrays
and read once per epoch, so Python only blocks at the end of an epoch (the depengine loop
reads each step's loss two steps behind). Data loading, initialization (same RNG draws, so
the same initial weights and shuffles) and printed columns are those of mlp_numpy.py.

    bash bench/peers/setup-mxnet.sh          # once: build/mxnet-venv with mxnet 1.9.1
    build/mxnet-venv/bin/python bench/peers/mlp_mxnet.py --epochs 3 [--model softmax]
    MXNET_ENGINE_TYPE=NaiveEngine build/mxnet-venv/bin/python bench/peers/mlp_mxnet.py

MXNET_ENGINE_TYPE picks MXNet's engine (default ThreadedEnginePerDevice; NaiveEngine runs
each operation synchronously in the pushing thread). MXNet's own thread defaults apply:
MXNET_CPU_WORKER_NTHREADS=1 engine worker for the CPU, and without OMP_NUM_THREADS (or
MXNET_OMP_MAX_THREADS) an OpenMP team of half the logical cores on x86.
"""
import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np

try:
    import mxnet as mx
    from mxnet import autograd, nd
except Exception as e:  # ImportError, OSError (a missing library), AttributeError (numpy>=1.24)
    sys.stderr.write(f"mlp_mxnet: cannot import mxnet ({type(e).__name__}: {e}); run "
                     f"bash bench/peers/setup-mxnet.sh and use build/mxnet-venv/bin/python\n")
    sys.exit(2)

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def read_idx(path, magic, ndim):
    if not os.path.exists(path):
        sys.exit(f"mlp_mxnet: {path} not found (install dataset-fashion-mnist)")
    with gzip.open(path, "rb") as f:
        data = f.read()
    got = struct.unpack(">I", data[:4])[0]
    if got != magic:
        sys.exit(f"mlp_mxnet: {path}: wrong magic 0x{got:08x}")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        sys.exit(f"mlp_mxnet: {path}: truncated or too long")
    return body.reshape(dims)


def load(split):
    prefix = os.path.join(DATA, "train" if split == "train" else "t10k")
    x = read_idx(prefix + "-images-idx3-ubyte.gz", 0x803, 3).reshape(-1, 784)
    y = read_idx(prefix + "-labels-idx1-ubyte.gz", 0x801, 1)
    return x, y


def normalize(x_u8):
    return (x_u8.astype(np.float32) / 255.0 - MEAN) / STD


def omp_threads():
    """The OpenMP team MXNet 1.9.1 sets up (src/engine/openmp.cc)."""
    for var in ("MXNET_OMP_MAX_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(var, "").strip().isdigit():
            return f"{int(os.environ[var])} ({var})"
    return f"{max(1, (os.cpu_count() or 2) // 2)} (default: half the cores)"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "softmax"], default="mlp")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--lr-decay", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()

    ctx = mx.cpu()
    xtr, ytr = load("train")
    xte, yte = load("test")
    xte_nd = nd.array(normalize(xte), ctx=ctx)
    yte_nd = nd.array(yte, ctx=ctx, dtype="float32")
    rng = np.random.default_rng(a.seed)
    f32 = np.float32
    # The draws of mlp_numpy.py, in (in, out) layout, transposed to FullyConnected's (out, in).
    if a.model == "mlp":
        init = [rng.normal(0, np.sqrt(2 / 784), (784, 256)).astype(f32).T, np.zeros(256, f32),
                rng.normal(0, 0.01, (256, 10)).astype(f32).T, np.zeros(10, f32)]
    else:
        init = [rng.normal(0, 0.01, (784, 10)).astype(f32).T, np.zeros(10, f32)]
    params = [nd.array(np.ascontiguousarray(w), ctx=ctx) for w in init]
    for w in params:
        w.attach_grad()

    def forward(x):
        if a.model == "softmax":
            return nd.FullyConnected(x, params[0], params[1], num_hidden=10)
        h = nd.relu(nd.FullyConnected(x, params[0], params[1], num_hidden=256))
        return nd.FullyConnected(h, params[2], params[3], num_hidden=10)

    engine = os.environ.get("MXNET_ENGINE_TYPE") or "ThreadedEnginePerDevice"
    workers = os.environ.get("MXNET_CPU_WORKER_NTHREADS") or "1"
    print(f"mxnet {mx.__version__}, engine {engine} (cpu workers {workers}, omp threads "
          f"{omp_threads()}), {os.cpu_count()} cores, model {a.model}, batch {a.batch}")
    print(f"{'epoch':>5} {'loss':>8} {'train acc':>9} {'test acc':>9} {'examples/s':>10} "
          f"{'epoch s':>10}")
    n = len(ytr)
    for epoch in range(a.epochs):
        lr = a.lr * a.lr_decay ** epoch
        t0 = time.perf_counter()
        order = rng.permutation(n)
        loss_sum = nd.zeros((1,), ctx=ctx)
        correct = nd.zeros((1,), ctx=ctx)
        for start in range(0, n, a.batch):
            idx = order[start:start + a.batch]
            x = nd.array(normalize(xtr[idx]), ctx=ctx)
            y = nd.array(ytr[idx], ctx=ctx, dtype="float32")
            with autograd.record():
                z = forward(x)
                nll = -nd.pick(nd.log_softmax(z, axis=1), y, axis=1)
                loss = nll.mean()
            loss.backward()
            for w in params:
                nd.sgd_update(w, w.grad, lr=lr, wd=0.0, rescale_grad=1.0, out=w)
            loss_sum += nll.sum()
            correct += (z.argmax(axis=1) == y).sum()
        # The one place the loop blocks: read the epoch's totals, let the last updates land.
        loss_total, correct_total = float(loss_sum.asscalar()), float(correct.asscalar())
        nd.waitall()
        secs = time.perf_counter() - t0
        test_acc = float((forward(xte_nd).argmax(axis=1) == yte_nd).mean().asscalar())
        print(f"{epoch + 1:5d} {loss_total / n:8.4f} {100 * correct_total / n:8.2f}% "
              f"{100 * test_acc:8.2f}% {n / secs:10.0f} {secs:10.2f}")


if __name__ == "__main__":
    main()
