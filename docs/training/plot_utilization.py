#!/usr/bin/env python3
"""Compute-lane utilization over time from depengine profiles (Chrome traces), one line per
run: the share of each bin of wall time during which at least one op ran on the CPU's
compute lane (the profiler's "busy", as nvidia-smi's utilization, which mnist_cnn.py and
`depengine train` print per epoch as one number), and the lane's occupancy (op time over
time x workers: how many of the workers the frontend kept running).

    python examples/python/mnist_cnn.py --limit 1280 --trace eager.json
    DEPENGINE_PROFILE=cpp.json depengine train --model cnn --epochs 1 --limit 1280
    python docs/training/plot_utilization.py out.png "Python eager=eager.json" "C++=cpp.json"

Needs matplotlib (not a dependency of the project: a venv of its own will do). A
DEPENGINE_PROFILE trace holds the whole program (the C++ run's test pass too); the
--trace of mnist_cnn.py holds its last training epoch.
"""
import argparse
import json
import os


def lane_per_bin(path, lane, bin_s, workers):
    """(bin start times in s, busy share, occupancy) per bin of `lane` on the CPU in a Chrome
    trace: busy = time with at least one op running; occupancy = op time / (time x workers),
    the mean number of ops running over the workers the engine was given."""
    with open(path) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    ops = [e for e in events if e.get("ph") == "X" and e.get("pid") == 1 and e.get("cat") == lane]
    if not ops:
        raise SystemExit(f"{path}: no op on the CPU's {lane} lane")
    spans = sorted((e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6) for e in ops)
    merged = []  # the union of the ops' intervals: time with at least one op running
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    t0, t1 = merged[0][0], merged[-1][1]
    bins = max(1, int((t1 - t0) / bin_s + 0.999))
    width = [min(bin_s, t1 - t0 - k * bin_s) for k in range(bins)]  # the last bin is short

    def per_bin(intervals):
        out = [0.0] * bins
        for a, b in intervals:
            a, b = a - t0, b - t0
            k = int(a / bin_s)
            while a < b and k < bins:
                end = min(b, (k + 1) * bin_s)
                out[k] += end - a
                a, k = end, k + 1
        return out

    busy = [x / w for x, w in zip(per_bin(merged), width)]
    occupancy = [x / (w * workers) for x, w in zip(per_bin(spans), width)]
    return [k * bin_s for k in range(bins)], busy, occupancy


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="the PNG to write")
    p.add_argument("runs", nargs="+", metavar="LABEL=TRACE.json")
    p.add_argument("--bin-ms", type=float, default=200.0)
    p.add_argument("--lane", default="compute")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="the engine's CPU workers (DEPENGINE_CPU_THREADS; default the cores)")
    p.add_argument("--title", default="CPU compute-lane utilization over time")
    a = p.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), dpi=110, sharex=True)
    for run in a.runs:
        label, _, path = run.partition("=")
        t, busy, occ = lane_per_bin(path, a.lane, a.bin_ms / 1e3, a.workers)
        for ax, values in zip(axes, (busy, occ)):
            mean = sum(values) / len(values)
            ax.step(t, [100 * x for x in values], where="post",
                    label=f"{label} (mean {100 * mean:.0f}%)")
    axes[0].set_title("busy: at least one op running", fontsize=9)
    axes[1].set_title(f"occupancy: mean ops running / {a.workers} workers", fontsize=9)
    axes[0].set_ylim(0, 105)
    axes[1].set_ylim(0, 130)  # above 100%: a worker's lingering helper ran ops too
    for ax in axes:
        ax.set_xlabel("seconds since the first op")
        ax.legend(fontsize=7, loc="lower left")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"% of each {a.bin_ms:g} ms")
    fig.suptitle(a.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(a.out)


if __name__ == "__main__":
    main()
