"""What the Python peers share with each other: the Fashion-MNIST IDX files of Debian's
dataset-fashion-mnist, the normalization of `depengine train`, and, so that every peer starts
from the same weights and sees the same examples in the same order:

- for the MLP (mlp_numpy.py, mlp_mxnet.py, mlp_torch.py): the initial weights (one seeded
  NumPy draw) and the command line;
- for the CNN of issue 25 (cnn_torch.py, cnn_mxnet.py): the training slice and its order per
  epoch (those of `depengine train --limit`), the fixed test slice, the initial weights, the
  command line and the machine-readable result line that cnn_side_by_side.py reads."""
import argparse
import gzip
import json
import os
import struct
import sys
import threading
import time

import numpy as np

# Debian's dataset-fashion-mnist, or the folder FASHION_MNIST_DIR names (tools/gpu-check.sh).
DATA = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
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


def parse_args(extra=None):
    """The peers' common flags; `extra(parser)` adds a peer's own."""
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "softmax"], default="mlp")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--lr-decay", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="intra-op threads of the peer (PyTorch's torch.set_num_threads); "
                        "default: the cores")
    if extra:
        extra(p)
    a = p.parse_args()
    if a.threads < 1:
        p.error(f"--threads must be at least 1, got {a.threads}")
    return a


def header():
    return (f"{'epoch':>5} {'loss':>8} {'train acc':>9} {'test acc':>9} {'examples/s':>10} "
            f"{'epoch s':>10}")


def epoch_line(epoch, loss, train_acc, test_acc, examples_per_s, secs):
    return (f"{epoch:5d} {loss:8.4f} {100 * train_acc:8.2f}% {100 * test_acc:8.2f}% "
            f"{examples_per_s:10.0f} {secs:10.2f}")


# ---- The CNN of issue 25 (the second source's `Net`) ----------------------------------------

CNN_LAYERS = (  # layer, weight shape in the (out, in[, kh, kw]) layout of PyTorch and MXNet
    ("conv1", (32, 1, 3, 3)), ("conv2", (64, 32, 3, 3)), ("fc1", (128, 9216)), ("fc2", (10, 128)),
)


def cnn_initial_weights(seed):
    """{"conv1.weight": ..., "conv1.bias": ..., ...} float32, drawn as PyTorch initializes
    Conv2d and Linear by default (weights and biases uniform in +-1/sqrt(fan_in)) from one
    seeded NumPy generator, so that every peer starts from the same weights."""
    rng = np.random.default_rng(seed)
    out = {}
    for layer, shape in CNN_LAYERS:
        bound = 1.0 / np.sqrt(np.prod(shape[1:]))
        out[layer + ".weight"] = rng.uniform(-bound, bound, shape).astype(np.float32)
        out[layer + ".bias"] = rng.uniform(-bound, bound, shape[0]).astype(np.float32)
    return out


_M64 = (1 << 64) - 1


def train_order(seed, n, epoch):
    """The order in which `depengine train` (tools/fashion_mnist/pipeline.cc) visits n examples
    in epoch `epoch` (0-based): a Fisher-Yates shuffle driven by splitmix64, seeded with
    seed ^ (0xd1b54a32d192ed03 * (epoch + 1)). Every CNN row uses it, so that Python and C++
    see the same batches."""
    idx = list(range(n))
    state = (seed ^ (0xd1b54a32d192ed03 * (epoch + 1))) & _M64
    for i in range(n - 1, 0, -1):
        state = (state + 0x9e3779b97f4a7c15) & _M64
        z = ((state ^ (state >> 30)) * 0xbf58476d1ce4e5b9) & _M64
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & _M64
        j = (z ^ (z >> 31)) % (i + 1)
        idx[i], idx[j] = idx[j], idx[i]
    return np.array(idx, dtype=np.int64)


def cnn_train_slice(limit, who):
    """The first `limit` training images (limit, 1, 28, 28) float32 normalized and their labels
    (int64), as `depengine train --limit` takes them; visit them in train_order."""
    x, y = load("train", who)
    if not 1 <= limit <= len(y):
        sys.exit(f"--limit must be in [1, {len(y)}], got {limit}")
    return normalize(x[:limit]).reshape(-1, 1, 28, 28), y[:limit].astype(np.int64)


def cnn_test_slice(limit, who):
    """The first `limit` test images, normalized, and their labels."""
    x, y = load("test", who)
    if not 1 <= limit <= len(y):
        sys.exit(f"--test-limit must be in [1, {len(y)}], got {limit}")
    return normalize(x[:limit]).reshape(-1, 1, 28, 28), y[:limit].astype(np.int64)


def cnn_parse_args(who, extra=None):
    p = argparse.ArgumentParser(prog=who, description="The CNN of issue 25 (conv 3x3 1->32, "
                                "ReLU, conv 3x3 32->64, ReLU, max-pool 2, dropout 0.25, dense "
                                "9216->128, ReLU, dropout 0.5, dense 10, log-softmax, NLL)")
    p.add_argument("--limit", type=int, default=12000,
                   help="train on the first N training images (default 12000)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--optimizer", choices=["adam", "adadelta"], default="adam")
    p.add_argument("--lr", type=float, help="default: 1e-3 for adam, 1.0 for adadelta")
    p.add_argument("--sleep-ms", type=float, default=0.0,
                   help="Python-side work per batch: a time.sleep standing for a data pipeline")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="compute threads (default: the cores)")
    p.add_argument("--test-limit", type=int, default=10000, help="test images (default 10000)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--cpu-trace", metavar="FILE.json",
                   help="write the process CPU time sampled every --cpu-sample-ms over the last "
                        "epoch's training (CpuSampler; docs/training/plot_utilization.py "
                        "plots it)")
    p.add_argument("--cpu-sample-ms", type=float, default=50.0,
                   help="the sampling interval of --cpu-trace (default 50 ms)")
    if extra:
        extra(p)
    a = p.parse_args()
    if not a.cpu_sample_ms > 0:
        p.error(f"--cpu-sample-ms must be positive, got {a.cpu_sample_ms:g}")
    if a.cpu_trace:  # a run that cannot write its trace fails now, not after training
        folder = os.path.dirname(a.cpu_trace) or "."
        if os.path.isdir(a.cpu_trace) or not os.access(folder, os.W_OK | os.X_OK):
            p.error(f"--cpu-trace {a.cpu_trace}: cannot write (a folder, or its folder is "
                    "missing or not writable)")
    if a.lr is None:
        a.lr = 1e-3 if a.optimizer == "adam" else 1.0
    for name in ("epochs", "batch", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(a, name)}")
    if not a.lr > 0 or a.sleep_ms < 0:
        p.error("--lr must be positive and --sleep-ms not negative")
    if a.optimizer == "adadelta" and a.lr != 1.0:
        p.error("--optimizer adadelta: MXNet 1.9's AdaDelta (and depengine.gluon's) has no "
                "learning rate, so only --lr 1.0 is the same update in every runtime")
    return a


class Meter:
    """Wall and process CPU time (every thread of the process) over the training loop:
    utilization = CPU time / (wall x cores)."""

    def __init__(self):
        self.wall = self.cpu = 0.0

    def __enter__(self):
        self._w, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall += time.perf_counter() - self._w
        self.cpu += time.process_time() - self._c


class CpuSampler:
    """The process's CPU time (every thread), sampled by a background thread every
    `interval_ms` over a `with` block, as [wall s, CPU s] pairs from the block's start: a
    peer without lanes then has a utilization over time, CPU time / (wall x cores) per bin
    (docs/training/plot_utilization.py), beside depengine's compute lane. The first sample is
    taken on entry and the last on exit; a sample the GIL delays carries its own time.

        with CpuSampler(50) as s:
            train()
        s.write("cpu.json", runtime="torch eager")
    """

    FORMAT = "process-cpu-samples"

    def __init__(self, interval_ms=50.0):
        self.interval = interval_ms / 1e3
        self.samples = []
        self._stop = threading.Event()
        self._thread = None

    def _sample(self):
        self.samples.append([time.perf_counter() - self._w0, time.process_time() - self._c0])

    def _run(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self):
        self._w0, self._c0 = time.perf_counter(), time.process_time()
        self.samples = [[0.0, 0.0]]
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()

    def write(self, path, runtime):
        with open(path, "w") as f:
            json.dump({"format": self.FORMAT, "runtime": runtime, "cores": os.cpu_count() or 1,
                       "interval_ms": self.interval * 1e3, "columns": ["wall_s", "cpu_s"],
                       "samples": [[round(w, 6), round(c, 6)] for w, c in self.samples]}, f)
            f.write("\n")


def cnn_epoch_line(epoch, loss, test_acc, examples_per_s, secs, util):
    return (f"epoch {epoch}: loss {loss:.4f}, test acc {100 * test_acc:.2f}%, "
            f"{examples_per_s:.0f} examples/s, {secs:.2f} s, utilization {100 * util:.1f}%")


def cnn_result(runtime, a, examples, meter, loss, test_acc):
    """The one machine-readable line (RESULT {json}) of a run, which cnn_side_by_side.py reads."""
    cores = os.cpu_count() or 1
    print("RESULT " + json.dumps({
        "runtime": runtime, "examples": examples, "wall_s": round(meter.wall, 4),
        "examples_per_s": round(examples / meter.wall, 2), "test_acc": round(test_acc, 5),
        "loss": round(loss, 5), "utilization": round(meter.cpu / (meter.wall * cores), 4),
        "utilization_kind": "process CPU time / (wall x cores)",
        "cpu_utilization": round(meter.cpu / (meter.wall * cores), 4), "cores": cores,
        "threads": a.threads, "batch": a.batch, "optimizer": a.optimizer, "lr": a.lr,
        "sleep_ms": a.sleep_ms, "epochs": a.epochs, "limit": a.limit,
        "test_limit": a.test_limit, "seed": a.seed}), flush=True)
