#!/usr/bin/env python3
"""The MLP of `depengine train` (784-256-10, ReLU, softmax cross-entropy, minibatch SGD, lr 0.1
times 0.8 per epoch, batch 256) written with depengine.gluon, as an MXNet Gluon user would:
nn.Sequential of nn.Dense, gluon.loss.SoftmaxCrossEntropyLoss, autograd.record(),
l.backward(), gluon.Trainer('sgd').step(), DataLoader over an ArrayDataset with ToTensor and
Normalize (each batch one engine op on the copy lane), gluon.metric's Loss and Accuracy
(one op per update, read at the epoch's end).

    python examples/python/mlp_gluon.py [--epochs 3] [--batch 256] [--lr 0.1] [--seed 42]

It starts from the weights of bench/peers' NumPy, MXNet and PyTorch MLPs and shuffles as they
do (the same seeded NumPy draws: the hidden layer N(0, 2/784), the output layer N(0, 0.01),
zero biases, then one permutation per epoch), so bench/peers/mlp_side_by_side.py compares
like with like. Every op is pushed to the engine and returns at once; the loop waits only
for the loss of the batch two steps back (bounding how far Python runs ahead) and reads the
epoch's totals at its end. Prints the columns of `depengine train`: loss, train and test
accuracy, examples/s and epoch time (training only), and the compute lane's busy share
(profiler).
"""
import argparse
import collections
import os
import re
import time

import numpy

import depengine as de
from depengine import autograd, gluon, np, npx
from depengine.gluon import nn
from depengine.gluon.data.vision import transforms

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's, as `depengine train` normalizes


class EpochPermutation(gluon.data.Sampler):
    """A new permutation of range(n) from `rng` each epoch (as the NumPy peer shuffles)."""

    def __init__(self, n, rng):
        self._n, self._rng = n, rng

    def __iter__(self):
        return iter(self._rng.permutation(self._n).tolist())

    def __len__(self):
        return self._n


def compute_busy(summary):
    """The CPU compute lane's busy share in a profile summary table."""
    m = re.search(r"^cpu compute\s+\d+\s+\d+\s+([0-9.]+)%", summary, re.M)
    return float(m.group(1)) if m else 0.0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--lr-decay", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    if a.epochs < 1 or a.batch < 1 or not a.lr > 0:
        p.error("--epochs and --batch must be at least 1, --lr positive")

    train = gluon.data.vision.FashionMNIST(root=a.data, train=True)
    test = gluon.data.vision.FashionMNIST(root=a.data, train=False)
    xtr, ytr = train[numpy.arange(len(train))]
    xte, yte = test[numpy.arange(len(test))]
    xte_nd = np.array(((xte.reshape(-1, 784) / 255.0 - MEAN) / STD).astype(numpy.float32))
    yte_nd = np.array(yte.astype(numpy.float32))

    rng = numpy.random.default_rng(a.seed)
    draws = [rng.normal(0, numpy.sqrt(2 / 784), (784, 256)), rng.normal(0, 0.01, (256, 10))]
    net = nn.Sequential()
    net.add(nn.Dense(256, activation="relu", in_units=784), nn.Dense(10, in_units=256))
    net.initialize()
    for i, w in enumerate(draws):
        dense = net[i]
        dense.weight.set_data(np.array(numpy.ascontiguousarray(w.T).astype(numpy.float32)))
        dense.bias.set_data(np.zeros(dense.bias.shape))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": a.lr})
    # Each batch is gathered and normalized by one engine op on the copy lane (the DataLoader's
    # gather of an ArrayDataset with vision transforms): the loop pushes it and goes on.
    to_input = transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    loader = gluon.data.DataLoader(
        gluon.data.ArrayDataset(xtr, ytr).transform_first(to_input),
        batch_size=a.batch, sampler=EpochPermutation(len(ytr), rng))

    engine = de.engine()
    print(f"depengine gluon, engine {engine.kind}, {engine.cpu_threads} CPU workers, "
          f"{os.cpu_count()} cores, model mlp, batch {a.batch}")
    print(f"{'epoch':>5} {'loss':>8} {'train acc':>9} {'test acc':>9} {'examples/s':>10} "
          f"{'epoch s':>10} {'compute':>9}")
    n = len(ytr)
    for epoch in range(a.epochs):
        trainer.set_learning_rate(a.lr * a.lr_decay ** epoch)
        with de.profile(engine) as prof:
            t0 = time.perf_counter()
            train_loss, train_acc = gluon.metric.Loss(), gluon.metric.Accuracy()
            pending = collections.deque()
            for X, y in loader:
                with autograd.record():
                    z = net(X)
                    l = loss_fn(z, y)
                l.backward()
                trainer.step(X.shape[0])
                train_loss.update(None, l)  # one op each, no blocker: the totals are
                train_acc.update(y, z)      # engine arrays, read at the epoch's end
                pending.append(l)
                if len(pending) > 2:
                    pending.popleft().wait_to_read()
            loss_mean, accuracy = train_loss.get()[1], train_acc.get()[1]
            npx.waitall()  # the last updates
            secs = time.perf_counter() - t0
        test_acc = (net(xte_nd).argmax(axis=1) == yte_nd).mean().item()
        print(f"{epoch + 1:5d} {loss_mean:8.4f} {100 * accuracy:8.2f}% "
              f"{100 * test_acc:8.2f}% {n / secs:10.0f} {secs:10.2f} "
              f"{compute_busy(prof.summary()):8.1f}%", flush=True)


if __name__ == "__main__":
    main()
