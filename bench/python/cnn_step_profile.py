"""Where one training step of issue 25's CNN spends its time: conv 3x3 1->32, ReLU, conv 3x3
32->64, ReLU, max-pool 2, dropout 0.25, flatten, dense 128 ReLU, dropout 0.5, dense 10,
softmax cross-entropy, Adadelta (lr 1.0); batch 64 of 1x28x28 inputs (random: the time does
not depend on the values). Runs `--warmup` steps, then profiles `--steps` steps eager and
hybridized (de.profile on the current engine) and prints each profile's per-op table, wall
time per step and the compute lane's busy share.

    python bench/python/cnn_step_profile.py [--steps 5] [--warmup 2] [--batch 64]
"""
import argparse
import time

import numpy

import depengine as de
from depengine import autograd, gluon, init, np, npx
from depengine.gluon import nn


def build():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(32, 3, activation="relu"), nn.Conv2D(64, 3, activation="relu"),
            nn.MaxPool2D(2), nn.Dropout(0.25), nn.Flatten(), nn.Dense(128, activation="relu"),
            nn.Dropout(0.5), nn.Dense(10))
    net.initialize(init.Xavier())
    return net


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args()
    r = numpy.random.default_rng(0)
    x = np.array(r.random((a.batch, 1, 28, 28)).astype(numpy.float32))
    y = np.array(r.integers(0, 10, a.batch).astype(numpy.float32))
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    engine = de.current_engine()
    for hybrid in (False, True):
        net = build()
        if hybrid:
            net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "adadelta", {"learning_rate": 1.0})

        def step():
            with autograd.record():
                l = loss(net(x), y)
            l.backward()
            trainer.step(a.batch)
            return l

        for _ in range(a.warmup):
            step()
        npx.waitall()
        with de.profile(engine) as prof:
            t0 = time.perf_counter()
            for _ in range(a.steps):
                l = step()
            npx.waitall()
            wall = time.perf_counter() - t0
        print(f"== {'hybridized' if hybrid else 'eager'}: {wall / a.steps * 1e3:.1f} ms per "
              f"step (batch {a.batch}, {a.steps} steps, loss {float(l.mean().item()):.3f})")
        print(prof.summary())


if __name__ == "__main__":
    main()
