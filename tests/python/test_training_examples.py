"""examples/python/mnist_cnn.py and mlp_gluon.py run and agree with the peers they are compared
with (bench/peers: the data order of `depengine train`, the NumPy MLP). No PyTorch or MXNet."""
import json
import os
import pathlib
import re
import runpy
import subprocess
import sys

import numpy
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "python"
PEERS = ROOT / "bench" / "peers"
DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")

needs_data = pytest.mark.skipif(not (DATA / "train-images-idx3-ubyte.gz").exists(),
                                reason="dataset-fashion-mnist is not installed")


def run(args, timeout=300):
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def result(stdout):
    lines = re.findall(r"^RESULT (\{.*\})$", stdout, re.M)
    assert len(lines) == 1, stdout
    return json.loads(lines[0])


def peers_data():
    sys.path.insert(0, str(PEERS))
    try:
        import fashion_mnist_data
    finally:
        sys.path.pop(0)
    return fashion_mnist_data


def test_cnn_order_is_depengine_trains():
    # The first and last indices of tools/fashion_mnist/pipeline.cc's shuffle (n 12000, seed
    # 42), printed by that C++ code: the Python rows train on the C++ row's batches.
    order = runpy.run_path(str(EXAMPLES / "mnist_cnn.py"))["TrainOrder"](12000, 42)
    first, second = list(order), list(order)
    assert first[:5] + first[-1:] == [2419, 11728, 10402, 8086, 3074, 9723]
    assert second[:5] + second[-1:] == [5085, 6544, 11125, 8256, 10233, 2144]
    assert sorted(first) == list(range(12000))
    peers = peers_data()
    assert list(peers.train_order(42, 12000, 0)) == first
    assert list(peers.train_order(42, 12000, 1)) == second


@needs_data
def test_mnist_cnn_trains_and_reports(tmp_path):
    # The peers' initial weights in save_parameters' format, as cnn_side_by_side.py writes them.
    weights = peers_data().cnn_initial_weights(7)
    keys = {"conv1": "0", "conv2": "1", "fc1": "5", "fc2": "7"}
    init = tmp_path / "init.npz"
    numpy.savez(init, **{f"{keys[k.split('.')[0]]}.{k.split('.')[1]}": v
                         for k, v in weights.items()})
    args = [EXAMPLES / "mnist_cnn.py", "--limit", "96", "--test-limit", "50", "--epochs", "2",
            "--seed", "7", "--init-from", init]
    first, again = run(args), run(args + ["--hybridize", "--sleep-ms", "1"])
    assert first.returncode == 0, first.stderr
    assert again.returncode == 0, again.stderr
    assert len(re.findall(r"^epoch \d: loss [0-9.]+, test acc [0-9.]+%, \d+ examples/s, "
                          r"[0-9.]+ s, compute lane busy [0-9.]+%", first.stdout, re.M)) == 2
    a, b = result(first.stdout), result(again.stdout)
    assert a["runtime"] == "depengine python eager" and b["runtime"] == "depengine python hybridized"
    assert a["examples"] == 192 and a["test_limit"] == 50 and a["sleep_ms"] == 0
    assert 0 < a["utilization"] <= 1 and 0 < a["cpu_utilization"]
    assert numpy.isfinite(a["loss"]) and 0 <= a["test_acc"] <= 1
    # Same weights, order and dropout seed: hybridize and a sleep change nothing computed.
    assert (a["loss"], a["test_acc"]) == (b["loss"], b["test_acc"])


def test_mnist_cnn_refuses_what_it_cannot_do():
    r = run([EXAMPLES / "mnist_cnn.py", "--optimizer", "adadelta", "--lr", "0.5"])
    assert r.returncode == 2 and "has no learning rate" in r.stderr
    r = run([EXAMPLES / "mnist_cnn.py", "--limit", "0"])
    assert r.returncode == 2 and "--limit must be at least 1" in r.stderr
    from depengine import npx
    if npx.num_gpus() == 0:
        r = run([EXAMPLES / "mnist_cnn.py", "--ctx", "gpu"])
        assert r.returncode != 0 and "no GPU" in r.stderr


@needs_data
def test_mlp_gluon_matches_the_numpy_peer():
    # Same initial weights and shuffle as bench/peers/mlp_numpy.py: one epoch gives the same
    # loss and accuracies up to float32 rounding; the line is the one mlp_side_by_side.py reads.
    gluon_run = run([EXAMPLES / "mlp_gluon.py", "--epochs", "1"])
    numpy_run = run([PEERS / "mlp_numpy.py", "--epochs", "1"])
    assert gluon_run.returncode == 0, gluon_run.stderr
    assert numpy_run.returncode == 0, numpy_run.stderr
    driver = runpy.run_path(str(PEERS / "mlp_side_by_side.py"))
    g = [m for m in map(driver["EPOCH_LINE"].match, gluon_run.stdout.splitlines()) if m]
    n = [m for m in map(driver["EPOCH_LINE"].match, numpy_run.stdout.splitlines()) if m]
    assert len(g) == 1 and len(n) == 1, (gluon_run.stdout, numpy_run.stdout)
    assert g[0].group(7) is not None  # the compute lane's busy share
    assert abs(float(g[0].group(2)) - float(n[0].group(2))) < 2e-3
    for col in (3, 4):
        assert abs(float(g[0].group(col)) - float(n[0].group(col))) < 0.3
    assert float(g[0].group(4)) > 75
