"""gluon's hybridize(): a small MLP (4 Dense layers of 64, batch 8), eager and hybridized
(recorded once, replayed), rounds alternating in one run; medians per call of
  - a forward outside autograd (inference: an npx.record segment replayed),
  - a training step: forward under autograd.record(), softmax cross-entropy, backward,
    Trainer.step (hybridized: an npx.CachedOp replayed, its gradient one tape node).

    python bench/python/hybridize.py [--rounds 5] [--calls 300] [--dropout 0]
"""
import argparse
import statistics
import time

from depengine import autograd, gluon, init, np, npx
from depengine.gluon import nn


def build(dropout):
    net = nn.HybridSequential()
    for _ in range(3):
        net.add(nn.Dense(64, activation="relu"))
        if dropout:
            net.add(nn.Dropout(dropout))
    net.add(nn.Dense(10))
    net.initialize(init.Xavier())
    return net


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--dropout", type=float, default=0.0)
    a = p.parse_args()
    x = np.random.normal(size=(8, 32))
    y = np.array([i % 10 for i in range(8)])
    nets = {"eager": build(a.dropout), "hybridized": build(a.dropout)}
    nets["hybridized"].hybridize()
    trainers = {k: gluon.Trainer(n.collect_params(), "sgd", {"learning_rate": 0.01})
                for k, n in nets.items()}
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def forward(name):
        nets[name](x)

    def train_step(name):
        with autograd.record():
            loss = loss_fn(nets[name](x), y)
        loss.backward()
        trainers[name].step(8)

    for name in nets:
        for _ in range(2):
            forward(name)
            train_step(name)
    npx.waitall()
    cases = {"forward": forward, "train step": train_step}
    times = {(c, k): [] for c in cases for k in nets}
    for _ in range(a.rounds):
        for case, fn in cases.items():
            for name in nets:
                t0 = time.perf_counter()
                for _ in range(a.calls):
                    fn(name)
                npx.waitall()
                times[(case, name)].append((time.perf_counter() - t0) / a.calls)
    med = {k: statistics.median(v) for k, v in times.items()}
    for case in cases:
        e, h = med[(case, "eager")], med[(case, "hybridized")]
        print(f"{case:<11} eager {e * 1e6:8.1f} us   hybridized {h * 1e6:8.1f} us   "
              f"eager / hybridized {e / h:.2f}x")
    print("hybridized net:", nets["hybridized"].hybrid_stats())


if __name__ == "__main__":
    main()
