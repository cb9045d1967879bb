"""What recording for autograd adds to a push from Python: y = x + 1 (and y = x * w) on (1, 2)
arrays with x.attach_grad(), pushed `--ops` times under autograd.record() and outside it,
alternating, on the naive and the threaded engine. Prints one JSON line per engine and op: the
medians (seconds per loop of pushes, the pushes alone, before the wait) and their ratio; the
issue's bound is 1.5.

    python bench/python/record_cost.py [--repeats 9] [--ops 10000]
"""
import argparse
import json
import statistics
import time

import depengine as de
from depengine import autograd, np, npx


def measure(kind, name, op, n, repeats):
    def plain():
        t = time.perf_counter()
        for _ in range(n):
            y = op()
        pushed = time.perf_counter() - t
        npx.waitall()
        return pushed, y

    def recorded():
        with autograd.record():
            t = time.perf_counter()
            for _ in range(n):
                y = op()
            pushed = time.perf_counter() - t
        npx.waitall()
        return pushed, y

    plain(), recorded()  # warm-up
    times = {"plain": [], "recorded": []}
    for _ in range(repeats):
        times["plain"].append(plain()[0])
        times["recorded"].append(recorded()[0])
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({"engine": kind, "op": name, "ops": n, "plain_s": med["plain"],
                      "recorded_s": med["recorded"], "ratio": med["recorded"] / med["plain"]}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--ops", type=int, default=10000)
    args = p.parse_args()
    for kind, opts in [("naive", {}), ("threaded", {"cpu_threads": 2})]:
        with de.Engine(kind, **opts):
            x = np.ones((1, 2))
            x.attach_grad()
            w = np.ones((1, 2))
            w.attach_grad()
            for name, op in [("x + 1", lambda: x + 1), ("x * w", lambda: x * w)]:
                measure(kind, name, op, args.ops, args.repeats)


if __name__ == "__main__":
    main()
