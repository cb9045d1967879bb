#!/usr/bin/python3
"""The Fashion-MNIST MLP (784-256-10, batch 256) side by side, in one run on one machine:
depengine's threaded engine from C++ (pushing each step, and replaying it recorded:
--replay), its naive engine fully serial (--threads 1) and with parallel kernels (the
default), depengine from Python with depengine.gluon (examples/python/mlp_gluon.py, in the
venv scripts/main.sh makes), NumPy (synchronous, OpenBLAS on every core), MXNet 1.9.1's
threaded engine and PyTorch eager on the CPU (when bench/peers/setup-mxnet.sh and
setup-torch.sh could install them; MXNet three ways: the imperative NDArray API, Gluon, and
Gluon hybridized). The runtimes take turns, round by round, so a noisy
moment hits all of them; each figure is the median over the rounds of a run's examples/s
over all its epochs (training time only).

    cmake --build build/release --target depengine_cli
    bash bench/peers/setup-mxnet.sh; bash bench/peers/setup-torch.sh   # optional: the peers
    python3 -m venv build/python-venv && build/python-venv/bin/pip install .  # optional
    bench/peers/mlp_side_by_side.py [--rounds 3] [--epochs 3] [--build build/release] [--only python,numpy]

Prints a Markdown table (also to --md FILE); a row that cannot run is reported as missing
with the reason. MXNet runs with OMP_NUM_THREADS set to the cores (its default is half the
cores on x86, one thread on a 2-core machine), PyTorch with torch.set_num_threads(cores),
depengine from Python with DEPENGINE_CPU_THREADS=cores. Both OpenMP peers run with
OMP_WAIT_POLICY=PASSIVE: on cores that other jobs share, PyTorch's OpenMP threads spin at
each barrier while the one they wait for is descheduled (measured here at load average 21,
2 threads: 695 examples/s with the default policy, 18,581 with PASSIVE, 17,087 on 1 thread).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# epoch loss train-acc test-acc examples/s epoch-s [compute% [pipeline%]]
EPOCH_LINE = re.compile(r"^\s*(\d+)\s+([0-9.]+)\s+([0-9.]+)%\s+([0-9.]+)%\s+([0-9.]+)\s+([0-9.]+)"
                        r"(?:\s+([0-9.]+)%)?")


def depengine_python_missing(python):
    """Why depengine.gluon cannot run from `python`, or None."""
    if not os.access(python, os.X_OK):
        return (f"{os.path.relpath(python, ROOT)} not found: python3 -m venv build/python-venv "
                "&& build/python-venv/bin/pip install .")
    p = subprocess.run([python, "-c", "from depengine import gluon; gluon.nn.Dense, gluon.Trainer"],
                       capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        lines = p.stderr.strip().splitlines()
        return f"depengine.gluon does not import ({lines[-1] if lines else p.returncode})"
    return None


def runtimes(build, epochs):
    """(name, command, environment, why it is missing or None) per runtime."""
    cli = os.path.join(build, "tools", "depengine", "depengine")
    if not os.access(cli, os.X_OK):
        sys.exit(f"mlp_side_by_side: {cli} not found (cmake --build {build} --target depengine_cli)")
    train = [cli, "train", "--model", "mlp", "--batch", "256", "--epochs", str(epochs)]
    cores = os.cpu_count() or 1
    out = [
        ("depengine threaded", train + ["--engine", "threaded"], None, None),
        ("depengine threaded, --replay", train + ["--engine", "threaded", "--replay"], None, None),
        ("depengine naive, 1 thread", train + ["--engine", "naive", "--threads", "1"], None, None),
        ("depengine naive, parallel kernels", train + ["--engine", "naive"], None, None),
    ]
    dpy = os.path.join(ROOT, "build", "python-venv", "bin", "python")
    out.append(("depengine from Python (gluon)",
                [dpy, os.path.join(ROOT, "examples/python/mlp_gluon.py"), "--epochs", str(epochs)],
                dict(os.environ, DEPENGINE_CPU_THREADS=str(cores)), depengine_python_missing(dpy)))
    out.append(("numpy", ["/usr/bin/python3", os.path.join(ROOT, "bench/peers/mlp_numpy.py"),
                          "--epochs", str(epochs)], None, None))
    mpy = os.path.join(ROOT, "build", "mxnet-venv", "bin", "python")
    for label, flags in (("", []), (", gluon", ["--gluon", "plain"]),
                         (", gluon hybridized", ["--gluon", "hybridized"])):
        out.append((f"mxnet 1.9.1 (ThreadedEnginePerDevice){label}",
                    [mpy, os.path.join(ROOT, "bench/peers/mlp_mxnet.py"), "--epochs",
                     str(epochs)] + flags,
                    dict(os.environ, OMP_NUM_THREADS=str(cores), OMP_WAIT_POLICY="PASSIVE"),
                    None if os.access(mpy, os.X_OK) else "bash bench/peers/setup-mxnet.sh"))
    tpy = os.path.join(ROOT, "build", "torch-venv", "bin", "python")
    out.append(("pytorch eager",
                [tpy, os.path.join(ROOT, "bench/peers/mlp_torch.py"), "--epochs", str(epochs),
                 "--threads", str(cores)], dict(os.environ, OMP_WAIT_POLICY="PASSIVE"),
                None if os.access(tpy, os.X_OK) else "bash bench/peers/setup-torch.sh"))
    return out


# The rows of runtimes(), in order, as --only names them (the first, the C++ threaded
# engine, is every table's reference and always runs).
KEYS = ("cpp", "replay", "naive1", "naive", "python", "numpy", "mxnet", "mxnet-gluon",
        "mxnet-hybrid", "torch")


def run_once(cmd, env):
    """Returns (examples/s over all epochs, mean epoch s, last test acc, compute busy list)."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-300:]}")
    epochs = [m for m in map(EPOCH_LINE.match, p.stdout.splitlines()) if m]
    if not epochs:
        raise RuntimeError(f"{' '.join(cmd)}: no epoch lines in its output")
    secs = [float(m.group(6)) for m in epochs]
    rates = [float(m.group(5)) for m in epochs]
    examples = sum(r * s for r, s in zip(rates, secs))
    busy = [float(m.group(7)) for m in epochs if m.group(7)]
    return examples / sum(secs), statistics.mean(secs), float(epochs[-1].group(4)), busy


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--md", help="also write the table to this file")
    ap.add_argument("--only", help="comma-separated rows, by key: " + ",".join(KEYS))
    a = ap.parse_args()

    rts = runtimes(a.build, a.epochs)
    if a.only:
        keep = set(a.only.split(","))
        if keep - set(KEYS):
            sys.exit(f"mlp_side_by_side: --only: unknown row(s) "
                     f"{', '.join(sorted(keep - set(KEYS)))} (rows: {','.join(KEYS)})")
        rts = [rt for key, rt in zip(KEYS, rts) if key in keep or key == "cpp"]
    results = {name: [] for name, _, _, _ in rts}
    errors = {}
    for r in range(a.rounds):
        for name, cmd, env, missing in rts:
            if missing or name in errors:
                continue
            try:
                results[name].append(run_once(cmd, env))
            except RuntimeError as e:
                errors[name] = str(e)
            got = f": {results[name][-1][0]:,.0f} examples/s" if name not in errors else ""
            print(f"round {r + 1}/{a.rounds}: {name} done{got}", file=sys.stderr, flush=True)

    base = results["depengine threaded"]
    base_rate = statistics.median(x[0] for x in base) if base else None
    lines = [f"MLP 784-256-10, batch 256, {a.epochs} epochs per run, median of {a.rounds} rounds "
             f"(runtimes interleaved), {os.cpu_count()} cores, OMP_WAIT_POLICY=PASSIVE for MXNet "
             f"and PyTorch; load average at the end "
             f"{os.getloadavg()[0]:.2f}.", "",
             "| runtime | examples/s | epoch s | threaded depengine vs this | test acc (last epoch) "
             "| compute busy |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, _, _, missing in rts:
        runs = results[name]
        if missing:
            lines.append(f"| {name} | missing ({missing}) | | | | |")
            continue
        if not runs:
            lines.append(f"| {name} | failed: {errors.get(name, '?')} | | | | |")
            continue
        rate = statistics.median(x[0] for x in runs)
        secs = statistics.median(x[1] for x in runs)
        busy = [b for x in runs for b in x[3]]
        busy_s = f"{min(busy):.1f}–{max(busy):.1f}%" if busy else "—"
        ratio = f"{base_rate / rate:.2f}x" if base_rate else "—"
        lines.append(f"| {name} | {rate:,.0f} | {secs:.2f} | {ratio} | {runs[-1][2]:.2f}% "
                     f"| {busy_s} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if a.md:
        with open(a.md, "w") as f:
            f.write(table)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
