"""What recording for autograd adds to a push from Python: y = x + 1 on a (1, 2) array with
x.attach_grad(), pushed `--ops` times under autograd.record() and outside it, alternating, on
the naive and the threaded engine. Prints one JSON line per engine: the medians (seconds per
loop of pushes, the pushes alone, before the wait) and their ratio; the issue's bound is 1.5.

    python bench/python/record_cost.py [--repeats 9] [--ops 10000]
"""
import argparse
import json
import statistics
import time

import depengine as de
from depengine import autograd, np, npx


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--ops", type=int, default=10000)
    args = p.parse_args()
    n = args.ops
    for kind, opts in [("naive", {}), ("threaded", {"cpu_threads": 2})]:
        with de.Engine(kind, **opts):
            x = np.ones((1, 2))
            x.attach_grad()

            def plain():
                t = time.perf_counter()
                for _ in range(n):
                    y = x + 1
                pushed = time.perf_counter() - t
                npx.waitall()
                return pushed, y

            def recorded():
                with autograd.record():
                    t = time.perf_counter()
                    for _ in range(n):
                        y = x + 1
                    pushed = time.perf_counter() - t
                npx.waitall()
                return pushed, y

            plain(), recorded()  # warm-up
            times = {"plain": [], "recorded": []}
            for _ in range(args.repeats):
                times["plain"].append(plain()[0])
                times["recorded"].append(recorded()[0])
            med = {k: statistics.median(v) for k, v in times.items()}
            print(json.dumps({"engine": kind, "ops": n, "plain_s": med["plain"],
                              "recorded_s": med["recorded"],
                              "ratio": med["recorded"] / med["plain"]}))


if __name__ == "__main__":
    main()
