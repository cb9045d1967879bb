#!/usr/bin/env python3
"""The CNN of issue 25 (the second source's `Net`) in Apache MXNet 1.9.1 Gluon on the CPU,
plain or hybridized (--hybridize: one CachedOp per input shape, as a Gluon user speeds a
network up): Conv2D(32, 3, relu), Conv2D(64, 3, relu), MaxPool2D(2), Dropout(0.25), Flatten,
Dense(128, relu), Dropout(0.5), Dense(10), SoftmaxCrossEntropyLoss (log-softmax + NLL);
batch 64; gluon.Trainer 'adam' 1e-3 (or 'adadelta').

    bash bench/peers/setup-mxnet.sh          # once: build/mxnet-venv with mxnet 1.9.1
    build/mxnet-venv/bin/python bench/peers/cnn_mxnet.py --limit 12000 [--hybridize] [--sleep-ms 5]

The training slice and its order (those of `depengine train --limit`), the test slice and
the initial weights are those of fashion_mnist_data.py, shared with cnn_torch.py; each batch
is gathered from the host arrays in the loop and copied in (nd.array), as a DataLoader over
an in-memory data set does. MXNet's engine runs the pushed ops
asynchronously; each batch's loss is read two batches later, as a loop that logs it would, so
the frontend runs at most two batches ahead. --threads sets OMP_NUM_THREADS (MXNet's
operators' OpenMP team; its default is half the cores); MXNET_CPU_WORKER_NTHREADS keeps its
default of 1 engine worker. Prints per epoch the loss, test accuracy, examples/s, wall time
and utilization (process CPU time / (wall x cores), training loop only), then one RESULT line
of JSON for cnn_side_by_side.py. --cpu-trace FILE.json also writes the process CPU time
sampled every 50 ms over the last epoch (fashion_mnist_data.CpuSampler), which
docs/training/plot_utilization.py plots as utilization over time beside depengine's compute
lane.
"""
import collections
import contextlib
import os
import sys
import time

import fashion_mnist_data as data


def main():
    a = data.cnn_parse_args("cnn_mxnet", lambda p: p.add_argument(
        "--hybridize", action="store_true", help="hybridize the network (CachedOp)"))
    # Read by libmxnet when it loads: set before the import.
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    try:
        import mxnet as mx
        from mxnet import autograd, gluon, nd
        from mxnet.gluon import nn
    except Exception as e:  # ImportError, OSError (a missing library), AttributeError (numpy)
        sys.stderr.write(f"cnn_mxnet: cannot import mxnet ({type(e).__name__}: {e}); run "
                         f"bash bench/peers/setup-mxnet.sh and use build/mxnet-venv/bin/python\n")
        sys.exit(2)

    ctx = mx.cpu()
    mx.random.seed(a.seed)  # the dropout masks
    xtr, ytr = data.cnn_train_slice(a.limit, "cnn_mxnet")
    xte_h, yte_h = data.cnn_test_slice(a.test_limit, "cnn_mxnet")
    xte, yte = nd.array(xte_h, ctx=ctx), nd.array(yte_h, ctx=ctx, dtype="float32")

    net = nn.HybridSequential()
    net.add(nn.Conv2D(32, 3, activation="relu", in_channels=1),
            nn.Conv2D(64, 3, activation="relu", in_channels=32),
            nn.MaxPool2D(2),
            nn.Dropout(0.25),
            nn.Flatten(),
            nn.Dense(128, activation="relu", in_units=9216),
            nn.Dropout(0.5),
            nn.Dense(10, in_units=128))
    net.initialize(ctx=ctx)
    weights = data.cnn_initial_weights(a.seed)
    params = list(net.collect_params().values())
    names = [f"{layer}.{kind}" for layer, _ in data.CNN_LAYERS for kind in ("weight", "bias")]
    assert len(params) == len(names), [p.name for p in params]
    for p, name in zip(params, names):
        assert p.shape == weights[name].shape, (p.name, p.shape, name)
        p.set_data(nd.array(weights[name], ctx=ctx))
    if a.hybridize:
        net.hybridize()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    if a.optimizer == "adam":
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": a.lr})
    else:
        # PyTorch's Adadelta defaults (rho 0.9, eps 1e-6); MXNet's epsilon default is 1e-5.
        trainer = gluon.Trainer(net.collect_params(), "adadelta",
                                {"learning_rate": a.lr, "rho": 0.9, "epsilon": 1e-6})

    print(f"mxnet {mx.__version__} gluon{' hybridized' if a.hybridize else ''}, CPU, "
          f"OMP_NUM_THREADS {a.threads}, {os.cpu_count()} cores, oneDNN "
          f"{mx.runtime.Features().is_enabled('MKLDNN')}; {a.limit} examples, batch {a.batch}, "
          f"{a.optimizer} lr {a.lr:g}, sleep {a.sleep_ms:g} ms per batch", flush=True)
    meter = data.Meter()
    n = a.limit
    loss = 0.0
    for epoch in range(a.epochs):
        order = data.train_order(a.seed, n, epoch)
        epoch_meter = data.Meter()
        loss_sum = 0.0
        pending = collections.deque()
        sampler = data.CpuSampler(a.cpu_sample_ms)
        with meter, epoch_meter, sampler if a.cpu_trace else contextlib.nullcontext():
            for start in range(0, n, a.batch):
                idx = order[start:start + a.batch]
                x = nd.array(xtr[idx], ctx=ctx)
                y = nd.array(ytr[idx], ctx=ctx, dtype="float32")
                with autograd.record():
                    l = loss_fn(net(x), y)
                l.backward()
                trainer.step(x.shape[0])
                pending.append(l.sum())
                if len(pending) > 2:
                    loss_sum += pending.popleft().asscalar()
                if a.sleep_ms:
                    time.sleep(a.sleep_ms / 1000)
            loss_sum += sum(p.asscalar() for p in pending)
            nd.waitall()  # the last updates
        loss = float(loss_sum) / n
        test_acc = evaluate(net, xte, yte, nd)
        print(data.cnn_epoch_line(epoch + 1, loss, test_acc, n / epoch_meter.wall,
                                  epoch_meter.wall,
                                  epoch_meter.cpu / (epoch_meter.wall * (os.cpu_count() or 1))),
              flush=True)
    if a.cpu_trace:
        sampler.write(a.cpu_trace, "mxnet gluon hybridized" if a.hybridize else "mxnet gluon")
    data.cnn_result("mxnet gluon hybridized" if a.hybridize else "mxnet gluon", a,
                    n * a.epochs, meter, loss, test_acc)


def evaluate(net, x, y, nd):
    correct = nd.zeros((1,), ctx=x.context)
    for start in range(0, y.shape[0], 1000):
        pred = net(x[start:start + 1000]).argmax(axis=1)
        correct += (pred == y[start:start + 1000]).sum()
    return float(correct.asscalar()) / y.shape[0]


if __name__ == "__main__":
    main()
