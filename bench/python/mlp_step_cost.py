"""Where the Python thread's time goes in one training step of examples/python/mlp_gluon.py
(784-256-10 MLP, ReLU, softmax cross-entropy, SGD, batch 256, Fashion-MNIST through the
DataLoader's gather op), against the step's compute.

Runs `--epochs` epochs of the same loop as mlp_gluon.py (the same calls in the same order:
DataLoader, autograd.record() around net(X) and the loss, l.backward(), trainer.step, the
epoch's loss and accuracy metrics, the wait for the loss two steps back), with each phase
bracketed by time.thread_time_ns() (this thread's CPU) and perf_counter_ns() (wall). Prints
per phase: µs of Python-thread CPU and of wall per step; then the CPU of every thread of the
process per step (from /proc/self/task: the main thread, the engine's workers, the wait
helpers), the engine ops pushed per step and the compute lane's busy time per step (one
more, profiled, epoch: de.profile).

    python bench/python/mlp_step_cost.py [--epochs 2] [--cprofile] [--hybridize]

--cprofile also runs one epoch under cProfile and prints the functions with the most own
time (cProfile's own cost inflates every figure: read its shares, not its times).
"""
import argparse
import collections
import cProfile
import os
import pstats
import re
import statistics
import time

import numpy

import depengine as de
from depengine import autograd, gluon, np, npx
from depengine.gluon import nn
from depengine.gluon.data.vision import transforms

MEAN, STD = 0.2860, 0.3530
PHASES = ("loader", "forward", "loss", "backward", "trainer.step", "metrics", "wait")


class EpochPermutation(gluon.data.Sampler):
    def __init__(self, n, rng):
        self._n, self._rng = n, rng

    def __iter__(self):
        return iter(self._rng.permutation(self._n).tolist())

    def __len__(self):
        return self._n


def thread_cpu():
    """{tid: (name, CPU seconds)} for every thread of this process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def setup(a):
    train = gluon.data.vision.FashionMNIST(root=a.data, train=True)
    xtr, ytr = train[numpy.arange(len(train))]
    rng = numpy.random.default_rng(a.seed)
    draws = [rng.normal(0, numpy.sqrt(2 / 784), (784, 256)), rng.normal(0, 0.01, (256, 10))]
    net = nn.HybridSequential() if a.hybridize else nn.Sequential()
    net.add(nn.Dense(256, activation="relu", in_units=784), nn.Dense(10, in_units=256))
    net.initialize()
    for i, w in enumerate(draws):
        net[i].weight.set_data(np.array(numpy.ascontiguousarray(w.T).astype(numpy.float32)))
        net[i].bias.set_data(np.zeros(net[i].bias.shape))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    if a.hybridize:
        net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    to_input = transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    loader = gluon.data.DataLoader(
        gluon.data.ArrayDataset(xtr, ytr).transform_first(to_input),
        batch_size=a.batch, sampler=EpochPermutation(len(ytr), rng))
    return net, loss_fn, trainer, loader


class Metrics:
    """The epoch's loss and accuracy: gluon.metric's Loss and Accuracy (one op each per step,
    as mlp_gluon.py), or `composed` of np ops as before gluon.metric (6 ops per step)."""

    def __init__(self, composed):
        self.composed = composed
        if composed:
            self.loss_sum, self.correct = np.zeros((1,)), np.zeros((1,))
        else:
            self.loss, self.acc = gluon.metric.Loss(), gluon.metric.Accuracy()

    def update(self, l, z, y):
        if self.composed:
            self.loss_sum += l.sum()
            self.correct += (z.argmax(axis=1) == y).sum()
        else:
            self.loss.update(None, l)
            self.acc.update(y, z)

    def get(self):
        if self.composed:
            return self.loss_sum.item(), self.correct.item()
        return self.loss.get()[1], self.acc.get()[1]


def epoch_timed(net, loss_fn, trainer, loader, composed):
    """One epoch of mlp_gluon.py's loop; returns ({phase: [[cpu ns per step], [wall ns per
    step]]}, steps)."""
    cost = {p: [[], []] for p in PHASES}
    cpu, wall = time.thread_time_ns, time.perf_counter_ns

    def mark(phase, c0, w0):
        c1, w1 = cpu(), wall()
        cost[phase][0].append(c1 - c0)
        cost[phase][1].append(w1 - w0)
        return c1, w1

    metrics = Metrics(composed)
    pending = collections.deque()
    steps = 0
    it = iter(loader)
    c, w = cpu(), wall()
    for X, y in it:
        c, w = mark("loader", c, w)
        with autograd.record():
            z = net(X)
            c, w = mark("forward", c, w)
            l = loss_fn(z, y)
        c, w = mark("loss", c, w)
        l.backward()
        c, w = mark("backward", c, w)
        trainer.step(X.shape[0])
        c, w = mark("trainer.step", c, w)
        metrics.update(l, z, y)
        pending.append(l)
        c, w = mark("metrics", c, w)
        if len(pending) > 2:
            pending.popleft().wait_to_read()
        c, w = mark("wait", c, w)
        steps += 1
    metrics.get()
    npx.waitall()
    return cost, steps


def epoch_plain(net, loss_fn, trainer, loader, composed):
    metrics = Metrics(composed)
    pending = collections.deque()
    for X, y in loader:
        with autograd.record():
            z = net(X)
            l = loss_fn(z, y)
        l.backward()
        trainer.step(X.shape[0])
        metrics.update(l, z, y)
        pending.append(l)
        if len(pending) > 2:
            pending.popleft().wait_to_read()
    metrics.get()
    npx.waitall()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--cprofile", action="store_true")
    p.add_argument("--composed-metrics", action="store_true",
                   help="the epoch's loss and accuracy summed with np ops (6 per step), as "
                        "before gluon.metric")
    p.add_argument("--hybridize", action="store_true",
                   help="the net as a HybridSequential, hybridized (mlp_gluon.py's is not)")
    a = p.parse_args()
    net, loss_fn, trainer, loader = setup(a)
    engine = de.engine()
    print(f"engine {engine.kind}, {engine.cpu_threads} CPU workers, {os.cpu_count()} cores, "
          f"batch {a.batch}, load average {os.getloadavg()[0]:.2f}")
    epoch_plain(net, loss_fn, trainer, loader, a.composed_metrics)  # warm-up

    total = {ph: [[], []] for ph in PHASES}
    steps = 0
    secs = 0.0
    before = thread_cpu()
    main_tid = threading_native_id()
    for _ in range(a.epochs):
        t0 = time.perf_counter()
        cost, n = epoch_timed(net, loss_fn, trainer, loader, a.composed_metrics)
        secs += time.perf_counter() - t0
        steps += n
        for ph in PHASES:
            total[ph][0] += cost[ph][0]
            total[ph][1] += cost[ph][1]
    med = statistics.median
    after = thread_cpu()
    print(f"\n{steps} steps in {secs:.2f} s: {secs / steps * 1e6:.0f} µs per step, "
          f"{steps * a.batch / secs:,.0f} examples/s")
    print(f"\n{'phase':<14}{'Python-thread CPU µs/step':>27}{'wall µs/step':>14}")
    print(f"{'':<14}{'mean':>14}{'median':>13}{'mean':>14}")
    for ph in PHASES:
        c, w = total[ph]
        print(f"{ph:<14}{sum(c) / steps / 1e3:14.1f}{med(c) / 1e3:13.1f}{sum(w) / steps / 1e3:14.1f}")
    print(f"{'all':<14}{sum(sum(v[0]) for v in total.values()) / steps / 1e3:14.1f}"
          f"{sum(med(v[0]) for v in total.values()) / 1e3:13.1f}"
          f"{sum(sum(v[1]) for v in total.values()) / steps / 1e3:14.1f}")

    print(f"\n{'thread':<24}{'CPU µs/step':>12}")
    groups = collections.defaultdict(float)
    for tid, (name, t) in after.items():
        used = t - before.get(tid, (name, 0.0))[1]
        label = "main (python)" if tid == main_tid else re.sub(r"[-_:]?\d+$", "", name) or name
        groups[label] += used
    for label, used in sorted(groups.items(), key=lambda kv: -kv[1]):
        if used > 0:
            print(f"{label:<24}{used / steps * 1e6:12.0f}")
    print(f"(CPU seconds from /proc at {os.sysconf('SC_CLK_TCK')} Hz ticks)")

    with de.profile(engine) as prof:
        epoch_plain(net, loss_fn, trainer, loader, a.composed_metrics)
    summary = prof.summary()
    n = len(loader)
    ops = int(re.search(r"^profile: (\d+) ops", summary, re.M).group(1))
    body = summary.split("\n", 2)[2].split("\nlane")[0]
    rows = [(m.group(1), int(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"^(\S+)\s+(\d+)\s+\d+\s+([0-9.]+)", body, re.M)]
    print(f"\nprofiled epoch: {ops / n:.1f} engine ops per step, "
          f"{sum(r[2] for r in rows) / n * 1e3:.0f} µs of op run time per step (both workers)")
    print(f"{'op':<26}{'per step':>9}{'µs/step':>9}")
    for name, count, ms in sorted(rows, key=lambda r: -r[2]):
        print(f"{name:<26}{count / n:9.2f}{ms / n * 1e3:9.0f}")
    if "\nlane" in summary:
        print("lane" + summary.split("\nlane", 1)[1])

    if a.cprofile:
        pr = cProfile.Profile()
        pr.enable()
        epoch_plain(net, loss_fn, trainer, loader, a.composed_metrics)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(25)


def threading_native_id():
    import threading
    return threading.get_native_id()


if __name__ == "__main__":
    main()
