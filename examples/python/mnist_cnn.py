#!/usr/bin/env python3
"""The second source's CNN trained with depengine.gluon on Fashion-MNIST (issue 25):

    conv 3x3 1->32, ReLU, conv 3x3 32->64, ReLU, max-pool 2, dropout 0.25, flatten (9216),
    dense 128, ReLU, dropout 0.5, dense 10; softmax cross-entropy (log-softmax + NLL);
    batch 64; Adam 1e-3 (or Adadelta, the source's Python optimizer).

    python examples/python/mnist_cnn.py [--epochs 1] [--limit 12000] [--hybridize]
        [--optimizer adam|adadelta] [--sleep-ms 5] [--ctx cpu|gpu] [--init-from FILE.npz]
        [--trace FILE.json] [--cpu-trace FILE.json]

Written as an MXNet Gluon user would (only the imports differ): gluon.data.vision.FashionMNIST
(Debian's dataset-fashion-mnist), transforms.ToTensor/Normalize, DataLoader,
nn.HybridSequential (--hybridize makes the whole network one recorded forward, a CachedOp, as
in MXNet), autograd.record(), loss.backward(), Trainer.step(). Every array op is pushed to the engine
and returns at once; the loop blocks only where it reads a number: each batch's loss two
batches later (as a loop that logs it would, which bounds how far Python runs ahead), and
the test accuracy after each epoch.

Prints per epoch: wall time, examples/s, test accuracy and the compute lane's utilization:
the time with at least one op running on it (the profiler's lane busy time, de.profile) over
the epoch's wall time. That is the figure the source measured with nvidia-smi: an eager
frontend leaves the device idle while Python works; an engine that takes ops ahead of time
keeps it busy. --sleep-ms K adds K ms of Python-side work per batch (a time.sleep standing for
a data pipeline or logging) to show it. The last line is one RESULT line of JSON for
bench/peers/cnn_side_by_side.py.

The training examples are the first --limit training images, visited each epoch in the order
`depengine train --limit` visits them (the same seed gives the same batches from Python and
from C++, and in bench/peers' PyTorch and MXNet scripts); the test slice is the first
--test-limit test images. --init-from loads initial weights written as
save_parameters writes them (cnn_side_by_side.py writes the peers' weights so); otherwise
they are drawn with init.Xavier('uniform', 'in', 1), PyTorch's default distribution for these
layers' weights.
"""
import argparse
import collections
import json
import os
import re
import sys
import threading
import time

import numpy

import depengine as de
from depengine import autograd, gluon, init, np, npx
from depengine.gluon import nn
from depengine.gluon.data.vision import transforms

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's, as `depengine train` normalizes


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--limit", type=int, default=12000, help="training examples (default 12000)")
    p.add_argument("--test-limit", type=int, default=10000, help="test images (default 10000)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--optimizer", choices=["adam", "adadelta"], default="adam")
    p.add_argument("--lr", type=float, help="default: 1e-3 for adam, 1.0 for adadelta")
    p.add_argument("--hybridize", action="store_true", help="net.hybridize()")
    p.add_argument("--sleep-ms", type=float, default=0.0,
                   help="Python-side work per batch: a time.sleep standing for a data pipeline")
    p.add_argument("--ctx", choices=["cpu", "gpu"], default="cpu", help="gpu: npx.gpu(0)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--init-from", metavar="FILE.npz", help="initial weights (save_parameters' format)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                   help="folder of the Fashion-MNIST IDX files")
    p.add_argument("--trace", metavar="FILE.json",
                   help="write the last epoch's profile as a Chrome trace (every op with its "
                        "lane and times: docs/training/plot_utilization.py plots it)")
    p.add_argument("--cpu-trace", metavar="FILE.json",
                   help="write the process CPU time sampled every 50 ms over the last epoch, "
                        "as bench/peers' runners do for PyTorch and MXNet (plot_utilization.py "
                        "plots it beside theirs)")
    a = p.parse_args()
    for flag, path in (("--trace", a.trace), ("--cpu-trace", a.cpu_trace)):
        folder = os.path.dirname(path or "") or "."
        if path and (os.path.isdir(path) or not os.access(folder, os.W_OK | os.X_OK)):
            p.error(f"{flag} {path}: cannot write (a folder, or its folder is missing or not "
                    "writable)")
    if a.lr is None:
        a.lr = 1e-3 if a.optimizer == "adam" else 1.0
    for name in ("epochs", "limit", "test_limit", "batch"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(a, name)}")
    if not a.lr > 0 or a.sleep_ms < 0:
        p.error("--lr must be positive and --sleep-ms not negative")
    if a.optimizer == "adadelta" and a.lr != 1.0:
        p.error("--optimizer adadelta: MXNet's AdaDelta (and gluon's here) has no learning rate; "
                "only --lr 1.0 is the same update as PyTorch's")
    return a


def build_net():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(32, kernel_size=3, activation="relu"),
            nn.Conv2D(64, kernel_size=3, activation="relu"),
            nn.MaxPool2D(pool_size=2),
            nn.Dropout(0.25),
            nn.Flatten(),
            nn.Dense(128, activation="relu"),
            nn.Dropout(0.5),
            nn.Dense(10))
    return net


class TrainOrder(gluon.data.Sampler):
    """The order of `depengine train` (tools/fashion_mnist/pipeline.cc), a new one each epoch:
    a Fisher-Yates shuffle driven by splitmix64 seeded with seed ^ (0xd1b54a32d192ed03 *
    (epoch + 1)), so that this loop and the C++ one train on the same batches."""

    M64 = (1 << 64) - 1

    def __init__(self, n, seed):
        self._n, self._seed, self._epoch = n, seed, 0

    def __iter__(self):
        idx = list(range(self._n))
        state = (self._seed ^ (0xd1b54a32d192ed03 * (self._epoch + 1))) & self.M64
        for i in range(self._n - 1, 0, -1):
            state = (state + 0x9e3779b97f4a7c15) & self.M64
            z = ((state ^ (state >> 30)) * 0xbf58476d1ce4e5b9) & self.M64
            z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & self.M64
            j = (z ^ (z >> 31)) % (i + 1)
            idx[i], idx[j] = idx[j], idx[i]
        self._epoch += 1
        return iter(idx)

    def __len__(self):
        return self._n


TO_INPUT = transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])


def load_split(root, train, limit):
    """(images (N, 28, 28, 1) uint8, labels) of the first `limit` examples of one split."""
    dataset = gluon.data.vision.FashionMNIST(root=root, train=train)
    if limit > len(dataset):
        sys.exit(f"mnist_cnn: the {'training' if train else 'test'} set has {len(dataset)} "
                 f"images, fewer than the {limit} asked for")
    return dataset[numpy.arange(limit)]


LANE_LINE = re.compile(r"^(\S+) compute\s+(\d+)\s+(\d+)\s+([0-9.]+)%\s+([0-9.]+)\s*$", re.M)
RUN_LINE = re.compile(r"over ([0-9.]+) ms")


def compute_lane(summary, device):
    """(busy seconds, mean concurrency) of `device`'s compute lane in a profile summary."""
    run_s = float(RUN_LINE.search(summary).group(1)) / 1e3
    for m in LANE_LINE.finditer(summary):
        if m.group(1) == device:
            return float(m.group(4)) / 100 * run_s, float(m.group(5))
    return 0.0, 0.0


def main():
    a = parse_args()
    if a.ctx == "gpu":
        if npx.num_gpus() < 1:
            sys.exit("mnist_cnn: --ctx gpu: no GPU (npx.num_gpus() is 0)")
        ctx = npx.gpu(0)
    else:
        ctx = npx.cpu()
    engine = de.engine()
    np.random.seed(a.seed)  # the dropout masks and Xavier's draws

    xtr, ytr = load_split(a.data, True, a.limit)
    xte, yte = load_split(a.data, False, a.test_limit)
    xte, yte = TO_INPUT(xte), yte.astype(numpy.float32)
    # Each batch is gathered and converted (ToTensor, Normalize) by one engine op on the copy
    # lane: the loop pushes it and goes on.
    loader = gluon.data.DataLoader(
        gluon.data.ArrayDataset(xtr, ytr).transform_first(TO_INPUT), batch_size=a.batch,
        sampler=TrainOrder(len(ytr), a.seed))

    net = build_net()
    if a.init_from:
        net.load_parameters(a.init_from, ctx=ctx)
    else:
        net.initialize(init.Xavier(rnd_type="uniform", factor_type="in", magnitude=1), ctx=ctx)
    if a.hybridize:
        net.hybridize()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    opt_params = {"learning_rate": a.lr}
    if a.optimizer == "adadelta":
        opt_params.update(rho=0.9, epsilon=1e-6)  # PyTorch's defaults
    trainer = gluon.Trainer(net.collect_params(), a.optimizer, opt_params)

    device = str(ctx) if a.ctx == "gpu" else "cpu"
    print(f"depengine gluon{' hybridized' if a.hybridize else ''} on {ctx}: engine "
          f"{engine.kind}, {engine.cpu_threads} CPU workers, {os.cpu_count()} cores; "
          f"{len(ytr)} examples, batch {a.batch}, {a.optimizer} lr {a.lr:g}, sleep "
          f"{a.sleep_ms:g} ms per batch", flush=True)
    total_wall = total_busy = total_cpu = 0.0
    loss = test_acc = 0.0
    for epoch in range(a.epochs):
        loss_sum = 0.0
        pending = collections.deque()
        samples = []
        stop = threading.Event()
        sampler = threading.Thread(target=sample_cpu, args=(samples, stop), daemon=True)
        if a.cpu_trace:
            sampler.start()
        with de.profile(engine) as prof:
            t0, c0 = time.perf_counter(), time.process_time()
            for X, y in loader:
                X, y = X.as_in_ctx(ctx), y.as_in_ctx(ctx)
                with autograd.record():
                    l = loss_fn(net(X), y)
                l.backward()
                trainer.step(X.shape[0])
                pending.append(l.sum())
                if len(pending) > 2:
                    loss_sum += pending.popleft().item()
                if a.sleep_ms:
                    time.sleep(a.sleep_ms / 1000)
            loss_sum += sum(p.item() for p in pending)
            npx.waitall()  # the last updates
            wall = time.perf_counter() - t0
            total_cpu += time.process_time() - c0
        if a.cpu_trace:
            stop.set()
            sampler.join()
        busy_s, conc = compute_lane(prof.summary(), device)
        if a.trace and epoch == a.epochs - 1:
            prof.write_chrome_trace(a.trace)
        if a.cpu_trace and epoch == a.epochs - 1:
            with open(a.cpu_trace, "w") as f:
                json.dump({"format": "process-cpu-samples", "runtime": "depengine python",
                           "cores": os.cpu_count() or 1, "interval_ms": 50,
                           "columns": ["wall_s", "cpu_s"], "samples": samples}, f)
        total_wall += wall
        total_busy += busy_s
        loss = loss_sum / len(ytr)
        test_acc = accuracy(net, xte, yte, ctx)
        print(f"epoch {epoch + 1}: loss {loss:.4f}, test acc {100 * test_acc:.2f}%, "
              f"{len(ytr) / wall:.0f} examples/s, {wall:.2f} s, compute lane busy "
              f"{100 * busy_s / wall:.1f}% (mean {conc:.2f} ops running)", flush=True)

    examples = len(ytr) * a.epochs
    print("RESULT " + json.dumps({
        "runtime": "depengine python " + ("hybridized" if a.hybridize else "eager"),
        "examples": examples, "wall_s": round(total_wall, 4),
        "examples_per_s": round(examples / total_wall, 2), "test_acc": round(test_acc, 5),
        "loss": round(loss, 5), "utilization": round(total_busy / total_wall, 4),
        "utilization_kind": "compute-lane busy time (profiler) / wall",
        "cpu_utilization": round(total_cpu / (total_wall * (os.cpu_count() or 1)), 4),
        "cores": os.cpu_count(), "threads": engine.cpu_threads, "batch": a.batch,
        "optimizer": a.optimizer, "lr": a.lr, "sleep_ms": a.sleep_ms, "epochs": a.epochs,
        "limit": a.limit, "test_limit": a.test_limit, "seed": a.seed, "ctx": str(ctx)}),
        flush=True)


def sample_cpu(samples, stop, interval_s=0.05):
    """Appends [wall s, process CPU s] since its start every interval_s until `stop` is set
    (the format of bench/peers/fashion_mnist_data.CpuSampler)."""
    w0, c0 = time.perf_counter(), time.process_time()
    samples.append([0.0, 0.0])
    while not stop.wait(interval_s):
        samples.append([time.perf_counter() - w0, time.process_time() - c0])
    samples.append([time.perf_counter() - w0, time.process_time() - c0])


def accuracy(net, x, y, ctx):
    """Test accuracy in predict mode (outside autograd.record(): dropout off), read once."""
    correct = np.zeros((1,), ctx=ctx)
    for start in range(0, len(y), 1000):
        xb = np.array(x[start:start + 1000], ctx=ctx)
        yb = np.array(y[start:start + 1000], ctx=ctx)
        correct = correct + (net(xb).argmax(axis=1) == yb).sum()
    return correct.item() / len(y)


if __name__ == "__main__":
    main()
