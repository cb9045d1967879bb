#!/usr/bin/python3
"""The CNN of issue 25 side by side, in one run on one machine: depengine from Python
(examples/python/mnist_cnn.py, eager and hybridized), depengine from C++ (`depengine train
--model cnn`), PyTorch eager (bench/peers/cnn_torch.py) and MXNet 1.9.1 Gluon, plain and
hybridized (bench/peers/cnn_mxnet.py). Every row trains on the same slice of Fashion-MNIST in
the same order (the first --limit training images in `depengine train`'s seeded shuffle) and
tests on the first min(--limit, 10000) test images, as `depengine train --limit` does; batch
64, the same optimizer. The Python rows also start from the same weights (written once by
this script; the C++ row draws its own). Each row
runs without and with --sleep-ms of Python-side work per batch (a time.sleep standing for a
data pipeline). The runs take turns, round by round, so a noisy moment hits all of them; the
figures are medians over the rounds.

    bash bench/peers/setup-torch.sh; bash bench/peers/setup-mxnet.sh       # the peers
    python3 -m venv build/python-venv && build/python-venv/bin/pip install .   # depengine
    cmake --build --preset release --target depengine_cli                  # the C++ row
    bench/peers/cnn_side_by_side.py [--rounds 3] [--limit 12000] [--sleep-ms 5] [--md FILE]
        [--traces DIR]    # each run's utilization over time, for plot_utilization.py

A row that cannot run (its venv or program is missing, or depengine has no Conv2D yet) is
reported as missing with the reason; the others still run. Utilization: depengine's is the
profiler's compute-lane busy time over the wall time; the peers' is process CPU time /
(wall x cores). Prints a Markdown table (also to --md) and the loss each runtime takes from
the sleep.

The OpenMP peers run with OMP_WAIT_POLICY=PASSIVE unless --omp-wait-policy says otherwise: on
a machine whose cores other jobs also use, PyTorch's OpenMP threads spin at each barrier while
the thread they wait for is descheduled. Measured here (2 cores, load average 21, 2 threads):
the CNN 47 examples/s with the default policy against 205 with PASSIVE (1 thread: 190), the
MLP 695 against 18,581; MXNet 254 against 278 on the CNN. On an idle machine the policy
matters little.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import fashion_mnist_data as data  # noqa: E402

RESULT = re.compile(r"^RESULT (\{.*\})\s*$", re.M)
# `depengine train`'s epoch line: epoch loss train-acc test-acc examples/s epoch-s compute% ...
EPOCH_LINE = re.compile(r"^\s*(\d+)\s+([0-9.]+)\s+([0-9.]+)%\s+([0-9.]+)%\s+([0-9.]+)\s+([0-9.]+)"
                        r"\s+([0-9.]+)%", re.M)
# mnist_cnn.py's HybridSequential: the children holding weights, in save_parameters' names.
GLUON_KEYS = {"conv1": "0", "conv2": "1", "fc1": "5", "fc2": "7"}


class Row:
    def __init__(self, key, name, cmd, env=None, missing=None, sleeps=True, parse=None,
                 trace_flags=()):
        self.key, self.name, self.cmd, self.env = key, name, cmd, env
        self.missing = missing      # why it cannot run, or None
        self.sleeps = sleeps        # takes --sleep-ms
        self.parse = parse or parse_result
        # With --traces: the flags that write its last epoch's utilization over time, each
        # with the suffix of its file (--trace: a Chrome trace; --cpu-trace: the process CPU
        # time sampled every 50 ms, as the peers have no lanes).
        self.trace_flags = trace_flags


def parse_result(stdout):
    m = RESULT.findall(stdout)
    if not m:
        raise RuntimeError("no RESULT line in its output")
    return json.loads(m[-1])


def parse_cli(stdout):
    """A RESULT line if `depengine train` prints one, else its last epoch line."""
    if RESULT.search(stdout):
        return parse_result(stdout)
    lines = EPOCH_LINE.findall(stdout)
    if not lines:
        raise RuntimeError("no RESULT or epoch line in its output")
    rates = [float(m[4]) for m in lines]
    secs = [float(m[5]) for m in lines]
    examples = sum(r * s for r, s in zip(rates, secs))
    return {"examples_per_s": examples / sum(secs), "wall_s": sum(secs),
            "test_acc": float(lines[-1][3]) / 100, "loss": float(lines[-1][1]),
            "utilization": statistics.mean(float(m[6]) for m in lines) / 100,
            "utilization_kind": "compute-lane busy (profiler), mean of epochs"}


def probe(python, code):
    """None when `python -c code` succeeds, else the last line it printed."""
    try:
        p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300,
                           cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if p.returncode == 0:
        return None
    lines = (p.stderr or p.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit {p.returncode}"


def cli_help(cli):
    try:
        p = subprocess.run([cli, "train", "--help"], capture_output=True, text=True, timeout=60)
        return p.stdout + p.stderr
    except OSError as e:
        return str(e)


def write_init(seed, folder):
    """The peers' initial weights (fashion_mnist_data.cnn_initial_weights) in save_parameters'
    format for mnist_cnn.py's network."""
    path = os.path.join(folder, f"cnn_init_{seed}.npz")
    w = data.cnn_initial_weights(seed)
    np.savez(path, **{f"{GLUON_KEYS[k.split('.')[0]]}.{k.split('.')[1]}": v for k, v in w.items()})
    return path


def rows(a, init_npz):
    common = ["--limit", str(a.limit), "--test-limit", str(a.test_limit), "--batch", "64",
              "--optimizer", a.optimizer, "--seed", str(a.seed)]
    if a.lr is not None:
        common += ["--lr", repr(a.lr)]
    out = []

    py = a.depengine_python
    why = None
    if not os.access(py, os.X_OK):
        why = (f"{os.path.relpath(py, ROOT)} not found: python3 -m venv build/python-venv && "
               "build/python-venv/bin/pip install .")
    else:
        err = probe(py, "from depengine import gluon, npx; from depengine.gluon import nn; "
                        "nn.Conv2D, nn.MaxPool2D, npx.convolution")
        if err:
            why = f"depengine.gluon has no CNN layers yet ({err})"
    env = dict(os.environ, DEPENGINE_CPU_THREADS=str(a.threads))
    example = [py, os.path.join(ROOT, "examples", "python", "mnist_cnn.py")] + common + [
        "--init-from", init_npz]
    both = (("--trace", ""), ("--cpu-trace", "_cpu"))
    out.append(Row("dep-eager", "depengine, Python (gluon, eager)", example, env, why,
                   trace_flags=both))
    out.append(Row("dep-hybrid", "depengine, Python (gluon, hybridized)", example + ["--hybridize"],
                   env, why, trace_flags=both))

    cli = os.path.join(a.build, "tools", "depengine", "depengine")
    why = None
    if not os.access(cli, os.X_OK):
        why = f"{os.path.relpath(cli, ROOT)} not found (cmake --build --preset release --target depengine_cli)"
        help_text = ""
    else:
        help_text = cli_help(cli)
        if "cnn" not in help_text:
            why = "`depengine train` has no --model cnn yet"
        elif "--limit" not in help_text:
            why = "`depengine train` has no --limit (cannot train on the same slice)"
    cmd = [cli, "train", "--model", "cnn", "--epochs", "1", "--threads", str(a.threads),
           "--batch", "64", "--seed", str(a.seed), "--limit", str(a.limit)]
    for flag, value in (("--test-limit", a.test_limit), ("--optimizer", a.optimizer),
                        ("--lr", a.lr)):
        if value is not None and flag in help_text:
            cmd += [flag, str(value)]
    if not why and a.optimizer != "adam" and "--optimizer" not in help_text:
        why = f"`depengine train` has no --optimizer (for {a.optimizer})"
    out.append(Row("dep-cpp", "depengine, C++ (depengine train --model cnn)", cmd, env, why,
                   sleeps="--sleep-ms" in help_text, parse=parse_cli,
                   trace_flags=(("--trace", ""),) if "--trace" in help_text else ()))

    omp = dict(os.environ)
    if a.omp_wait_policy != "unset":
        omp["OMP_WAIT_POLICY"] = a.omp_wait_policy
    tpy = os.path.join(ROOT, "build", "torch-venv", "bin", "python")
    out.append(Row("torch", "PyTorch eager", [tpy, os.path.join(HERE, "cnn_torch.py")] + common +
                   ["--threads", str(a.threads)], omp,
                   None if os.access(tpy, os.X_OK) else "bash bench/peers/setup-torch.sh",
                   trace_flags=(("--cpu-trace", ""),)))
    mpy = os.path.join(ROOT, "build", "mxnet-venv", "bin", "python")
    mx = [mpy, os.path.join(HERE, "cnn_mxnet.py")] + common + ["--threads", str(a.threads)]
    why = None if os.access(mpy, os.X_OK) else "bash bench/peers/setup-mxnet.sh"
    out.append(Row("mxnet", "MXNet 1.9.1 Gluon", mx, omp, why,
                   trace_flags=(("--cpu-trace", ""),)))
    out.append(Row("mxnet-hybrid", "MXNet 1.9.1 Gluon, hybridized", mx + ["--hybridize"], omp, why,
                   trace_flags=(("--cpu-trace", ""),)))
    if a.only:
        keep = set(a.only.split(","))
        unknown = keep - {r.key for r in out}
        if unknown:
            sys.exit(f"cnn_side_by_side: --only: unknown row(s) {', '.join(sorted(unknown))} "
                     f"(rows: {', '.join(r.key for r in out)})")
        out = [r for r in out if r.key in keep]
    return out


def run_once(row, sleep_ms, timeout, trace=None):
    cmd = row.cmd + (["--sleep-ms", repr(sleep_ms)] if sleep_ms else [])
    for flag, suffix in row.trace_flags if trace else ():
        cmd += [flag, trace[:-len(".json")] + suffix + ".json"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=row.env, timeout=timeout,
                           cwd=ROOT)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {timeout} s") from None
    if p.returncode != 0:
        tail = (p.stderr.strip() or p.stdout.strip())[-300:]
        raise RuntimeError(f"exit {p.returncode}: {tail}")
    return row.parse(p.stdout)


def med(runs, key):
    return statistics.median(r[key] for r in runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=int, default=12000)
    ap.add_argument("--test-limit", type=int,
                    help="test images; default min(--limit, 10000), as `depengine train --limit` tests")
    ap.add_argument("--sleep-ms", type=float, default=5.0)
    ap.add_argument("--optimizer", choices=["adam", "adadelta"], default="adam")
    ap.add_argument("--lr", type=float, help="default: each script's (1e-3 adam, 1.0 adadelta)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="depengine's workers = PyTorch's and MXNet's threads (default: the cores)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--depengine-python", default=os.path.join(ROOT, "build", "python-venv", "bin",
                                                               "python"))
    ap.add_argument("--only", help="comma-separated rows: dep-eager,dep-hybrid,dep-cpp,torch,"
                                   "mxnet,mxnet-hybrid")
    ap.add_argument("--omp-wait-policy", choices=["PASSIVE", "ACTIVE", "unset"], default="PASSIVE",
                    help="OMP_WAIT_POLICY of the OpenMP peers (PyTorch, MXNet); default PASSIVE "
                         "(see the module docstring)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    ap.add_argument("--md", help="also write the tables to this file")
    ap.add_argument("--json", help="also write every run's result to this file")
    ap.add_argument("--traces", metavar="DIR",
                    help="write each run's utilization over its (last) epoch to "
                         "DIR/KEY_sleepS_rR.json: the depengine rows' Chrome traces (--trace), "
                         "the process CPU time sampled every 50 ms (--cpu-trace; the Python "
                         "rows' as KEY_sleepS_rR_cpu.json); docs/training/plot_utilization.py "
                         "plots them side by side")
    a = ap.parse_args()
    if a.rounds < 1 or a.sleep_ms <= 0:
        ap.error("--rounds must be at least 1 and --sleep-ms positive")
    if a.test_limit is None:
        a.test_limit = min(a.limit, 10000)
    if a.traces:
        os.makedirs(a.traces, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="cnn_side_by_side.") as tmp:
        rs = rows(a, write_init(a.seed, tmp))
        configs = [(r, s) for r in rs if not r.missing for s in ([0.0, a.sleep_ms] if r.sleeps
                                                                else [0.0])]
        results = {(r.key, s): [] for r, s in configs}
        errors = {}
        for rnd in range(a.rounds):
            for r, s in configs:
                if (r.key, s) in errors:
                    continue
                trace = (os.path.join(os.path.abspath(a.traces), f"{r.key}_sleep{s:g}_r{rnd + 1}.json")
                         if a.traces else None)
                try:
                    results[(r.key, s)].append(run_once(r, s, a.timeout, trace))
                    got = results[(r.key, s)][-1]
                    note = f"{got['examples_per_s']:.0f} examples/s"
                except (RuntimeError, ValueError, KeyError) as e:
                    errors[(r.key, s)] = str(e)
                    note = f"failed: {e}"
                print(f"round {rnd + 1}/{a.rounds}: {r.name}, sleep {s:g} ms: {note}",
                      file=sys.stderr, flush=True)

    torch_rate = (med(results[("torch", 0.0)], "examples_per_s")
                  if results.get(("torch", 0.0)) else None)
    lines = [f"CNN of issue 25 on Fashion-MNIST: {a.limit} training examples (one epoch), batch 64, "
             f"{a.optimizer}{'' if a.lr is None else f' lr {a.lr:g}'}, test on {a.test_limit}; "
             f"{a.threads} threads / workers, {os.cpu_count()} cores, OMP_WAIT_POLICY "
             f"{a.omp_wait_policy} for the OpenMP peers; median of {a.rounds} "
             f"rounds (runs interleaved); load average at the end {os.getloadavg()[0]:.2f}."
             + ("" if a.test_limit == min(a.limit, 10000) else
                f" (The C++ row tests on the first {min(a.limit, 10000)} test images, as "
                "`depengine train --limit` does.)"), "",
             "| runtime | sleep/batch | examples/s | vs PyTorch | wall s | test acc | "
             "utilization | CPU time / (wall x cores) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rs:
        if r.missing:
            lines.append(f"| {r.name} | | missing ({r.missing}) | | | | | |")
            continue
        for s in ([0.0, a.sleep_ms] if r.sleeps else [0.0]):
            runs = results[(r.key, s)]
            if not runs:
                lines.append(f"| {r.name} | {s:g} ms | failed: {errors.get((r.key, s), '?')} "
                             "| | | | | |")
                continue
            rate = med(runs, "examples_per_s")
            vs = f"{rate / torch_rate:.2f}x" if torch_rate and s == 0 else ""
            cpu = (f"{100 * med(runs, 'cpu_utilization'):.1f}%"
                   if all("cpu_utilization" in x for x in runs) else "—")
            lines.append(f"| {r.name} | {s:g} ms | {rate:,.0f} | {vs} | {med(runs, 'wall_s'):.2f} "
                         f"| {100 * med(runs, 'test_acc'):.2f}% "
                         f"| {100 * med(runs, 'utilization'):.1f}% | {cpu} |")
    lines += ["", "Utilization as issue 25 defines it: depengine rows, compute-lane busy time "
              "(profiler: at least one op running) / wall; the peers, process CPU time / (wall x "
              "cores). The last column is the second figure for every Python row: on a machine "
              "that other jobs load, an op counts as running while its thread waits for a core, "
              "so only that column compares across rows then.", "",
              f"Loss with {a.sleep_ms:g} ms of Python-side work per batch (examples/s; medians):",
              "", "| runtime | no sleep | with sleep | loss |", "|---|---:|---:|---:|"]
    for r in rs:
        base, slept = results.get((r.key, 0.0)), results.get((r.key, a.sleep_ms))
        if r.missing or not base or not r.sleeps or not slept:
            why = ("missing" if r.missing else "no --sleep-ms" if not r.sleeps else "failed")
            lines.append(f"| {r.name} | {why} | | |")
            continue
        b, w = med(base, "examples_per_s"), med(slept, "examples_per_s")
        lines.append(f"| {r.name} | {b:,.0f} | {w:,.0f} | {100 * (1 - w / b):.1f}% |")
    table = "\n".join(lines) + "\n"
    print(table)
    if a.md:
        with open(a.md, "w") as f:
            f.write(table)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({f"{k} sleep {s:g}": v for (k, s), v in results.items()}, f, indent=1)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
