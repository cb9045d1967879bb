#!/usr/bin/env python3
"""Compute-lane utilization over time from depengine profiles (Chrome traces), one line per
run: the share of each bin of wall time during which at least one op ran on the CPU's
compute lane (the profiler's "busy", as nvidia-smi's utilization, which mnist_cnn.py and
`depengine train` print per epoch as one number), and the lane's occupancy (op time over
time x workers: how many of the workers the frontend kept running).

    python examples/python/mnist_cnn.py --limit 1280 --trace eager.json
    depengine train --model cnn --epochs 1 --limit 1280 --trace cpp.json
    build/torch-venv/bin/python bench/peers/cnn_torch.py --limit 1280 --cpu-trace torch.json
    python docs/training/plot_utilization.py out.png "Python eager=eager.json" "C++=cpp.json" \
        "PyTorch=torch.json"

A peer without lanes (PyTorch, MXNet) is given as the process CPU time its runner sampled
over the epoch (--cpu-trace of bench/peers/cnn_torch.py and cnn_mxnet.py, the
"process-cpu-samples" format of fashion_mnist_data.CpuSampler; mnist_cnn.py writes the same
for depengine's Python frontend): it is drawn in the occupancy panel as CPU time / (time x
cores) per bin, dashed, and has no line in the busy panel. On a machine that other jobs load
the two differ: an op counts as running while its thread waits for a core, CPU time does not.
Every file holds the last training epoch only.

Needs matplotlib (not a dependency of the project: a venv of its own will do).
"""
import argparse
import bisect
import json
import os


CPU_SAMPLES = "process-cpu-samples"


def load(path):
    with open(path) as f:
        return json.load(f)


def cpu_per_bin(doc, path, bin_s):
    """(bin start times in s, CPU-busy share) per bin of a process's CPU-time samples: CPU
    time spent in the bin / (bin x cores), the cumulative CPU time interpolated linearly
    between samples at the bins' edges."""
    samples = doc.get("samples") or []
    cores = doc.get("cores")
    if len(samples) < 2 or not cores:
        raise SystemExit(f"{path}: fewer than two CPU-time samples, or no core count")
    wall = [w for w, _ in samples]
    cpu = [c for _, c in samples]
    if any(b < a for a, b in zip(wall, wall[1:])):
        raise SystemExit(f"{path}: the samples' wall times go backwards")
    t0, t1 = wall[0], wall[-1]

    def cpu_at(t):  # the cumulative CPU time at wall time t
        k = bisect.bisect_right(wall, t) - 1
        if k >= len(wall) - 1:
            return cpu[-1]
        span = wall[k + 1] - wall[k]
        f = (t - wall[k]) / span if span > 0 else 1.0
        return cpu[k] + f * (cpu[k + 1] - cpu[k])

    bins = max(1, int((t1 - t0) / bin_s + 0.999))
    starts = [k * bin_s for k in range(bins)]
    share = []
    for a in starts:
        b = min(a + bin_s, t1 - t0)
        share.append((cpu_at(t0 + b) - cpu_at(t0 + a)) / ((b - a) * cores) if b > a else 0.0)
    return starts, share


def lane_per_bin(events, path, lane, bin_s, workers):
    """(bin start times in s, busy share, occupancy) per bin of `lane` on the CPU in a Chrome
    trace: busy = time with at least one op running; occupancy = op time / (time x workers),
    the mean number of ops running over the workers the engine was given."""
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


def closed(starts, values, bin_s):
    """A step line's points in percent, with the last bin drawn to its end."""
    return starts + [starts[-1] + bin_s], [100 * x for x in values] + [100 * values[-1]]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="the PNG to write")
    p.add_argument("runs", nargs="+", metavar="LABEL=TRACE.json")
    p.add_argument("--bin-ms", type=float, default=200.0)
    p.add_argument("--lane", default="compute")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="the engine's CPU workers (DEPENGINE_CPU_THREADS; default the cores)")
    p.add_argument("--title", default="CPU utilization over time (solid: depengine's compute "
                                      "lane; dashed: process CPU time)")
    a = p.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 6), dpi=110, sharex=True)
    sampled = False
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {}  # one color per label: a run's lane and its CPU samples match
    for run in a.runs:
        label, _, path = run.partition("=")
        if not path:
            raise SystemExit(f"expected LABEL=FILE.json, got {run!r}")
        doc = load(path)
        color = colors.setdefault(label, cycle[len(colors) % len(cycle)])
        if isinstance(doc, dict) and doc.get("format") == CPU_SAMPLES:
            sampled = True
            t, share = cpu_per_bin(doc, path, a.bin_ms / 1e3)
            mean = sum(share) / len(share)
            axes[1].step(*closed(t, share, a.bin_ms / 1e3), where="post", linestyle="--",
                         color=color, label=f"{label}, process CPU (mean {100 * mean:.0f}%)")
            continue
        t, busy, occ = lane_per_bin(doc, path, a.lane, a.bin_ms / 1e3, a.workers)
        for ax, values in zip(axes, (busy, occ)):
            mean = sum(values) / len(values)
            ax.step(*closed(t, values, a.bin_ms / 1e3), where="post", color=color,
                    label=f"{label} (mean {100 * mean:.0f}%)")
    axes[0].set_title("depengine: busy (at least one op running)", fontsize=9)
    axes[1].set_title(f"occupancy: mean ops running / {a.workers} workers"
                      + ("\n(dashed: process CPU time / (time x cores))" if sampled else ""),
                      fontsize=9)
    axes[0].set_ylim(0, 105)
    axes[1].set_ylim(0, 130)  # above 100%: a worker's lingering helper ran ops too
    for ax in axes:
        ax.set_xlabel("seconds since the first op (CPU samples: since the epoch began)")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"% of each {a.bin_ms:g} ms")
    fig.suptitle(a.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(a.out)


if __name__ == "__main__":
    main()
