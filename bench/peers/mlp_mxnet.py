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
    build/mxnet-venv/bin/python bench/peers/mlp_mxnet.py --gluon hybridized

--gluon plain|hybridized writes the same model with MXNet's Gluon instead, as
examples/python/mlp_gluon.py does with depengine's: nn.HybridSequential of nn.Dense,
gluon.loss.SoftmaxCrossEntropyLoss, gluon.Trainer('sgd') (step(batch) rescales by
1/batch, as the loss there is per example), the same initial weights set with set_data;
`hybridized` calls net.hybridize() (MXNet's CachedOp) and the loss's.

MXNET_ENGINE_TYPE picks MXNet's engine (default ThreadedEnginePerDevice; NaiveEngine runs
each operation synchronously in the pushing thread). MXNet's own thread defaults apply:
MXNET_CPU_WORKER_NTHREADS=1 engine worker for the CPU, and without OMP_NUM_THREADS (or
MXNET_OMP_MAX_THREADS) an OpenMP team of half the logical cores on x86.
"""
import os
import sys
import time

import numpy as np

import fashion_mnist_data as data

try:
    import mxnet as mx
    from mxnet import autograd, nd
except Exception as e:  # ImportError, OSError (a missing library), AttributeError (numpy>=1.24)
    sys.stderr.write(f"mlp_mxnet: cannot import mxnet ({type(e).__name__}: {e}); run "
                     f"bash bench/peers/setup-mxnet.sh and use build/mxnet-venv/bin/python\n")
    sys.exit(2)


def omp_threads():
    """The OpenMP team MXNet 1.9.1 sets up (src/engine/openmp.cc)."""
    for var in ("MXNET_OMP_MAX_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(var, "").strip().isdigit():
            return f"{int(os.environ[var])} ({var})"
    return f"{max(1, (os.cpu_count() or 2) // 2)} (default: half the cores)"


def imperative_model(a, ctx, draws):
    """The MLP as NDArray calls: (forward(x), step(x, y, lr) -> (z, per-example loss))."""
    # The draws of mlp_numpy.py, transposed to FullyConnected's (out, in) layout.
    params = [nd.array(np.ascontiguousarray(w.T), ctx=ctx) for w in draws]
    for w in params:
        w.attach_grad()

    def forward(x):
        if a.model == "softmax":
            return nd.FullyConnected(x, params[0], params[1], num_hidden=10)
        h = nd.relu(nd.FullyConnected(x, params[0], params[1], num_hidden=256))
        return nd.FullyConnected(h, params[2], params[3], num_hidden=10)

    def step(x, y, lr):
        with autograd.record():
            z = forward(x)
            nll = -nd.pick(nd.log_softmax(z, axis=1), y, axis=1)
            loss = nll.mean()
        loss.backward()
        for w in params:
            nd.sgd_update(w, w.grad, lr=lr, wd=0.0, rescale_grad=1.0, out=w)
        return z, nll

    return forward, step


def gluon_model(a, ctx, draws):
    """The MLP with mxnet.gluon, as examples/python/mlp_gluon.py writes it with depengine's:
    (net, step(x, y, lr) -> (z, per-example loss))."""
    from mxnet import gluon
    from mxnet.gluon import nn

    net = nn.HybridSequential()
    if a.model == "softmax":
        net.add(nn.Dense(10, in_units=784))
    else:
        net.add(nn.Dense(256, activation="relu", in_units=784), nn.Dense(10, in_units=256))
    net.initialize(ctx=ctx)
    for i, dense in enumerate(net):  # draws: w1, b1[, w2, b2] in (in, out) layouts
        dense.weight.set_data(nd.array(np.ascontiguousarray(draws[2 * i].T), ctx=ctx))
        dense.bias.set_data(nd.array(draws[2 * i + 1], ctx=ctx))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    if a.gluon == "hybridized":
        net.hybridize(static_alloc=True, static_shape=True)
        loss_fn.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": a.lr})

    def step(x, y, lr):
        if trainer.learning_rate != lr:
            trainer.set_learning_rate(lr)
        with autograd.record():
            z = net(x)
            l = loss_fn(z, y)
        l.backward()
        trainer.step(x.shape[0])
        return z, l

    return net, step


def main():
    a = data.parse_args(lambda p: p.add_argument(
        "--gluon", choices=["off", "plain", "hybridized"], default="off",
        help="write the model with Gluon (nn.Dense, Trainer), hybridized or not"))

    ctx = mx.cpu()
    xtr, ytr = data.load("train", "mlp_mxnet")
    xte, yte = data.load("test", "mlp_mxnet")
    xte_nd = nd.array(data.normalize(xte), ctx=ctx)
    yte_nd = nd.array(yte, ctx=ctx, dtype="float32")
    rng = np.random.default_rng(a.seed)
    draws = data.initial_weights(a.model, rng)
    make = imperative_model if a.gluon == "off" else gluon_model
    forward, step = make(a, ctx, draws)

    engine = os.environ.get("MXNET_ENGINE_TYPE") or "ThreadedEnginePerDevice"
    workers = os.environ.get("MXNET_CPU_WORKER_NTHREADS") or "1"
    api = "" if a.gluon == "off" else f" gluon ({a.gluon})"
    print(f"mxnet {mx.__version__}{api}, engine {engine} (cpu workers {workers}, omp threads "
          f"{omp_threads()}), {os.cpu_count()} cores, model {a.model}, batch {a.batch}")
    print(data.header())
    n = len(ytr)
    for epoch in range(a.epochs):
        lr = a.lr * a.lr_decay ** epoch
        t0 = time.perf_counter()
        order = rng.permutation(n)
        loss_sum = nd.zeros((1,), ctx=ctx)
        correct = nd.zeros((1,), ctx=ctx)
        for start in range(0, n, a.batch):
            idx = order[start:start + a.batch]
            x = nd.array(data.normalize(xtr[idx]), ctx=ctx)
            y = nd.array(ytr[idx], ctx=ctx, dtype="float32")
            z, per_example = step(x, y, lr)
            loss_sum += per_example.sum()
            correct += (z.argmax(axis=1) == y).sum()
        # The one place the loop blocks: read the epoch's totals, let the last updates land.
        loss_total, correct_total = float(loss_sum.asscalar()), float(correct.asscalar())
        nd.waitall()
        secs = time.perf_counter() - t0
        test_acc = float((forward(xte_nd).argmax(axis=1) == yte_nd).mean().asscalar())
        print(data.epoch_line(epoch + 1, loss_total / n, correct_total / n, test_acc, n / secs,
                              secs))


if __name__ == "__main__":
    main()
