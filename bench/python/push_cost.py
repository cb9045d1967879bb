"""Per-op cost of the d2l chapter 13.2 loops, for one runtime: depengine.np, mxnet.np or
NumPy. Prints one JSON line of medians (seconds). bench/python/run.sh runs it under each
runtime's Python and prints them side by side.

    python bench/python/push_cost.py depengine|mxnet|numpy [--repeats 7] [--ops 10000]
"""
import argparse
import json
import os
import statistics
import time


def load(runtime):
    if runtime == "depengine":
        from depengine import np, npx
        return np, npx.waitall, lambda a: a.wait_to_read()
    if runtime == "mxnet":
        from mxnet import np, npx
        npx.set_np()
        return np, npx.waitall, lambda a: a.wait_to_read()
    import numpy
    return numpy, lambda: None, lambda a: None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("runtime", choices=["depengine", "mxnet", "numpy"])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--ops", type=int, default=10000)
    args = p.parse_args()
    np, waitall, wait_to_read = load(args.runtime)
    n = args.ops
    x = np.ones((1, 2), dtype="float32")

    def pushes():  # the loop alone: for an engine, the pushes; the work may still be running
        t = time.perf_counter()
        for _ in range(n):
            y = x + 1
        pushed = time.perf_counter() - t
        waitall()
        return pushed, y

    def pipelined():
        t = time.perf_counter()
        for _ in range(n):
            y = x + 1
        waitall()
        return time.perf_counter() - t, y

    def synchronous():
        t = time.perf_counter()
        for _ in range(n):
            y = x + 1
            wait_to_read(y)
        return time.perf_counter() - t, y

    a = np.ones((1000, 1000), dtype="float32")

    def dots():
        t = time.perf_counter()
        for _ in range(10):
            b = np.dot(a, a)
        waitall()
        return time.perf_counter() - t, b

    out = {"runtime": args.runtime, "cores": os.cpu_count(), "ops": n}
    for name, f in [("push", pushes), ("pipelined", pipelined), ("synchronous", synchronous),
                    ("ten_dots", dots)]:
        f()  # warm-up
        out[name] = statistics.median(f()[0] for _ in range(args.repeats))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
