"""gluon's hybridize(): the forward of a small MLP (4 Dense layers of 64, batch 8), eager and
hybridized (recorded once, replayed), rounds alternating in one run; medians per forward.

    python bench/python/hybridize.py [--rounds 5] [--calls 300]
"""
import argparse
import statistics
import time

from depengine import init, np, npx
from depengine.gluon import nn


def build():
    net = nn.HybridSequential()
    net.add(nn.Dense(64, activation="relu"), nn.Dense(64, activation="relu"),
            nn.Dense(64, activation="relu"), nn.Dense(10))
    net.initialize(init.Xavier())
    return net


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=300)
    a = p.parse_args()
    x = np.random.normal(size=(8, 32))
    nets = {"eager": build(), "hybridized": build()}
    nets["hybridized"].hybridize()
    for net in nets.values():
        net(x)
        net(x)
    npx.waitall()
    times = {k: [] for k in nets}
    for _ in range(a.rounds):
        for name, net in nets.items():
            t0 = time.perf_counter()
            for _ in range(a.calls):
                net(x)
            npx.waitall()
            times[name].append((time.perf_counter() - t0) / a.calls)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"{k:<12}{v * 1e6:9.1f} us per forward")
    print(f"eager / hybridized: {med['eager'] / med['hybridized']:.2f}x")


if __name__ == "__main__":
    main()
