#!/usr/bin/env python3
"""A/B of two builds of the engine library in one depengine_peers binary.

The engine is a shared library (build/release/engine/libdepengine_engine.so*), so two builds
of it can run under the same benchmark binary: copy each build's library files into a
folder, and this script runs depengine_peers with LD_LIBRARY_PATH pointing at one folder,
then the other, round after round. Each process also runs Taskflow's dependent-async (when
the binary was built with -DDEPENGINE_TASKFLOW_DIR=), and the figure compared is depengine's
ns per task over Taskflow's in the same process, which takes out much of what the machine
does from one process to the next. Prints each process's figures, then per pattern and
build the median ratio, its quartiles, and the share of (A, B) round pairs where B is lower.

The peer is not always a neutral yardstick: an engine build can change the peer's own
figure in the same process (in stop 37, Taskflow's chain took about 1,100 ns per task in
processes with one build and 480 with the other). `--peer none` runs depengine alone and
compares its ns per task directly; run both before trusting a ratio that moved.

Each round's line ends with the cache-line hand-off between two threads that the driver
measured before and after its runs (workloads/machine.h). On a shared virtual machine it
moves between about 50 and about 250 ns as the host places the cores; a round where it is
high is one where every runtime was slow.

    mkdir -p /tmp/a && cp -a build/release/engine/libdepengine_engine.so* /tmp/a/
    ... change the engine, rebuild, copy into /tmp/b ...
    python3 bench/peers/ab_engine.py --rounds 20 /tmp/a /tmp/b

`--task-us 1` compares tasks of 1 µs instead of empty ones (100 ms of serial work per
pattern, N = 100,000): the figure is then depengine's speedup over the serial loop in the
same process (higher is better), and the peer's speedup is shown beside it.

No timed test depends on it; docs/benchmarks.md quotes its output.
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile

PATTERNS = ["trivial", "chain", "random_dag", "fan"]


def run_timed(binary, libdir, patterns, peer, threads, task_us):
    """Speedups over the serial loop for tasks of `task_us` µs: {pattern: (depengine, peer)}."""
    env = dict(os.environ, LD_LIBRARY_PATH=libdir)
    runtimes = ["serial", "depengine"] + ([] if peer == "none" else [peer])
    with tempfile.TemporaryDirectory() as tmp:
        table = os.path.join(tmp, "points.csv")
        cmd = [binary, "--threads", str(threads), "--reps", "5", "--warmup", "1",
               "--max-tasks", "100000", "--budget-ms", "100", "--sizes", str(task_us),
               "--patterns", ",".join(patterns), "--runtimes", ",".join(runtimes), "--csv", table]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"ab_engine: {' '.join(cmd)} exited {done.returncode}:\n{done.stderr.strip()}")
        rows = list(csv.DictReader(open(table)))
    speedup = {}
    for r in rows:
        if r["runtime"] in runtimes[1:] and r["wall_median_s"] and r["serial_median_s"]:
            speedup[(r["pattern"], r["runtime"])] = (float(r["serial_median_s"]) /
                                                    float(r["wall_median_s"]))
    figures = {}
    for pat in patterns:
        if (pat, "depengine") not in speedup:
            sys.exit(f"ab_engine: no 1 µs figure for {pat} in {' '.join(cmd)}")
        figures[pat] = (speedup[(pat, "depengine")], speedup.get((pat, peer), 1.0))
    return figures


def run_once(binary, libdir, patterns, peer, threads):
    env = dict(os.environ, LD_LIBRARY_PATH=libdir)
    cmd = [binary, "--threads", str(threads), "--reps", "5", "--warmup", "1",
           "--max-tasks", "100000", "--sizes", "0", "--patterns", ",".join(patterns),
           "--runtimes", "depengine" if peer == "none" else "depengine," + peer]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"ab_engine: {' '.join(cmd)} exited {done.returncode}:\n{done.stderr.strip()}")
    out = done.stdout
    # The "ns per task" table: a header naming the columns (pattern, parallelism, then the
    # runtimes, the serial loop among them), then one line per pattern.
    lines = out.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("ns per task"))
    header = lines[start + 1].split()
    if peer != "none" and peer not in header:
        sys.exit(f"ab_engine: {binary} did not run '{peer}' (built without its peer?)")
    ours = header.index("depengine")
    figures = {}
    for line in lines[start + 2:]:
        f = line.split()
        if len(f) != len(header) or f[0] not in patterns:
            break
        figures[f[0]] = (float(f[ours]), 1.0 if peer == "none" else float(f[header.index(peer)]))
    missing = [pat for pat in patterns if pat not in figures]
    if missing:
        sys.exit(f"ab_engine: no figures for {', '.join(missing)} in:\n{out}")
    # The cache-line hand-off between two threads before and after the runs
    # (workloads/machine.h): a process that ran in a slow placement of the cores shows it here.
    handoff = next((l.split(": ", 1)[1] for l in lines if l.startswith("cache-line hand-off")), "")
    return figures, handoff


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", help="folder with build A's libdepengine_engine.so*")
    p.add_argument("b", help="folder with build B's libdepengine_engine.so*")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--patterns", default=",".join(PATTERNS))
    p.add_argument("--peer", default="taskflow-async",
                   help="the runtime to divide by in each process, or 'none' (ns per task)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--task-us", type=int, default=0,
                   help="tasks of this many µs, compared as speedups over the serial loop")
    p.add_argument("--binary", default="build/release/bench/peers/depengine_peers")
    args = p.parse_args()
    patterns = args.patterns.split(",")
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"ab_engine: {args.binary} is not an executable (build the release preset)")
    for d in (args.a, args.b):
        if not os.path.isdir(d) or not any(
                n.startswith("libdepengine_engine.so") for n in os.listdir(d)):
            sys.exit(f"ab_engine: {d} has no libdepengine_engine.so*")
    ratios = {(pat, d): [] for pat in patterns for d in ("A", "B")}
    if args.task_us > 0:
        return timed_rounds(args, patterns, ratios)
    for r in range(1, args.rounds + 1):
        for name, d in (("A", args.a), ("B", args.b)):
            figs, handoff = run_once(args.binary, d, patterns, args.peer, args.threads)
            placement = f"  [hand-off {handoff}]" if handoff else ""
            if args.peer == "none":
                shown = "  ".join(f"{pat} {figs[pat][0]:.0f}" for pat in patterns)
                print(f"round {r} {name}: {shown}  (ns per task, depengine){placement}",
                      flush=True)
            else:
                shown = "  ".join(f"{pat} {figs[pat][0]:.0f}/{figs[pat][1]:.0f}" for pat in patterns)
                print(f"round {r} {name}: {shown}  (ns per task, depengine/{args.peer})"
                      f"{placement}", flush=True)
            for pat in patterns:
                ratios[(pat, name)].append(figs[pat][0] / figs[pat][1])
    if args.peer == "none":
        print(f"\ndepengine alone, ns per task: median (quartiles) over {args.rounds} rounds")
    else:
        print(f"\ndepengine / {args.peer}, same process: median (quartiles) over {args.rounds} "
              "rounds")
    for pat in patterns:
        a, b = ratios[(pat, "A")], ratios[(pat, "B")]
        q = lambda v: statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
        lower = sum(1 for x in b for y in a if x < y) / (len(a) * len(b))
        fmt = ".0f" if args.peer == "none" else ".2f"
        print(f"{pat:11s} A {statistics.median(a):{fmt}} ({q(a)[0]:{fmt}}-{q(a)[2]:{fmt}})  "
              f"B {statistics.median(b):{fmt}} ({q(b)[0]:{fmt}}-{q(b)[2]:{fmt}})  "
              f"B lower in {lower:.0%} of pairs")


def timed_rounds(args, patterns, speedups):
    for r in range(1, args.rounds + 1):
        for name, d in (("A", args.a), ("B", args.b)):
            figs = run_timed(args.binary, d, patterns, args.peer, args.threads, args.task_us)
            peer = "" if args.peer == "none" else f" ({args.peer}'s in brackets)"
            shown = "  ".join(f"{pat} {figs[pat][0]:.2f}" +
                              ("" if args.peer == "none" else f" [{figs[pat][1]:.2f}]")
                              for pat in patterns)
            print(f"round {r} {name}: {shown}  (speedup over serial, {args.task_us} µs tasks"
                  f"{peer})", flush=True)
            for pat in patterns:
                speedups[(pat, name)].append(figs[pat][0])
    print(f"\ndepengine's speedup over the serial loop, {args.task_us} µs tasks: median "
          f"(quartiles) over {args.rounds} rounds")
    for pat in patterns:
        a, b = speedups[(pat, "A")], speedups[(pat, "B")]
        q = lambda v: statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
        higher = sum(1 for x in b for y in a if x > y) / (len(a) * len(b))
        print(f"{pat:11s} A {statistics.median(a):.2f} ({q(a)[0]:.2f}-{q(a)[2]:.2f})  "
              f"B {statistics.median(b):.2f} ({q(b)[0]:.2f}-{q(b)[2]:.2f})  "
              f"B higher in {higher:.0%} of pairs")


if __name__ == "__main__":
    main()
