"""gluon.data.DataLoader's batch gather (depengine/batch.h): a batch of an ArrayDataset or a
vision data set, with ToTensor / Normalize, is one engine op on the CPU's copy lane whose
arrays are bitwise a plain NumPy gather of the same indices followed by the transforms as
NumPy computes them, in MXNet's order (shuffle on and off, last_batch keep / discard /
rollover over epochs), on the naive engine and the threaded one with 1, 2 and 4 workers."""
import json
import os

import numpy
import pytest

import depengine as de
from depengine import gluon
from depengine._depengine import _data
from depengine.gluon.data import ArrayDataset, DataLoader
from depengine.gluon.data.vision import transforms

ENGINES = [("naive", 0), ("threaded", 1), ("threaded", 2), ("threaded", 4)]
MEAN, STD = (0.3, 0.5, 0.7), (0.2, 0.25, 0.4)


def engine_of(kind):
    name, workers = kind
    return de.Engine(name, cpu_threads=workers) if workers else de.Engine(name)


def data(n=23):
    r = numpy.random.default_rng(7)
    images = r.integers(0, 256, (n, 4, 5, 3), dtype=numpy.uint8)       # (H, W, C) samples
    labels = r.integers(0, 10, n).astype(numpy.int32)
    features = r.standard_normal((n, 6))                                # float64
    return images, labels, features


def expected_orders(n, shuffle, epochs, seed):
    """Each epoch's sample order as MXNet's samplers draw it (NumPy's global generator)."""
    numpy.random.seed(seed)
    return [numpy.random.permutation(n).tolist() if shuffle else list(range(n))
            for _ in range(epochs)]


def expected_batches(orders, batch_size, last_batch):
    """MXNet's BatchSampler over those orders: a short last batch kept, discarded, or
    carried into the next epoch's first batch (rollover)."""
    out, carry = [], []
    for order in orders:
        epoch, batch = [], carry
        carry = []
        for i in order:
            batch.append(i)
            if len(batch) == batch_size:
                epoch.append(batch)
                batch = []
        if batch and last_batch == "keep":
            epoch.append(batch)
        elif batch and last_batch == "rollover":
            carry = batch
        out.append(epoch)
    return out


def to_tensor_normalize(images):
    """ToTensor then Normalize(MEAN, STD), written out in NumPy on a gathered batch."""
    x = (images.transpose(0, 3, 1, 2).astype(numpy.float32) / 255.0).astype(numpy.float32)
    mean = numpy.asarray(MEAN, numpy.float32).reshape(-1, 1, 1)
    std = numpy.asarray(STD, numpy.float32).reshape(-1, 1, 1)
    return (x - mean) / std


def assert_same(got, want):
    got = got.asnumpy()
    assert got.dtype == numpy.float32 and got.shape == want.shape
    numpy.testing.assert_array_equal(got, want.astype(numpy.float32))


@pytest.mark.parametrize("kind", ENGINES, ids=lambda k: f"{k[0]}{k[1]}")
@pytest.mark.parametrize("last_batch", ["keep", "discard", "rollover"])
@pytest.mark.parametrize("shuffle", [False, True], ids=["in-order", "shuffled"])
def test_batches_are_a_numpy_gather_in_mxnet_order(shuffle, last_batch, kind):
    images, labels, features = data()
    t = transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    cases = [
        # (data set, the NumPy reference of a batch of indices)
        (ArrayDataset(images, labels).transform_first(t),
         lambda i: (to_tensor_normalize(images[i]), labels[i])),
        (ArrayDataset(features, labels), lambda i: (features[i], labels[i])),
        (ArrayDataset(images), lambda i: (images[i],)),
        (ArrayDataset(images).transform(transforms.ToTensor()),
         lambda i: ((images[i].transpose(0, 3, 1, 2).astype(numpy.float32) / 255.0),)),
    ]
    with engine_of(kind):
        for ds, ref in cases:
            loader = DataLoader(ds, batch_size=5, shuffle=shuffle, last_batch=last_batch)
            numpy.random.seed(3)
            got = [list(loader) for _ in range(3)]
            want = expected_batches(expected_orders(len(images), shuffle, 3, 3), 5, last_batch)
            assert [len(e) for e in got] == [len(e) for e in want]
            for got_epoch, want_epoch in zip(got, want):
                for batch, idx in zip(got_epoch, want_epoch):
                    batch = batch if isinstance(batch, tuple) else (batch,)
                    for g, w in zip(batch, ref(numpy.asarray(idx))):
                        assert_same(g, w)


def test_the_gather_equals_the_per_sample_path():
    images, labels, _ = data()
    t = transforms.Compose([transforms.ToTensor(), transforms.Normalize(0.286, 0.353)])
    ds = ArrayDataset(images, labels).transform_first(t)
    idx = [4, 0, 22, 9, 9, -1]
    fast = next(iter(DataLoader(ds, batch_sampler=[idx])))
    slow = gluon.data.default_batchify_fn([ds[i] for i in idx])
    for a, b in zip(fast, slow):
        numpy.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


def test_one_op_per_batch_on_the_copy_lane():
    images, labels, _ = data()
    ds = ArrayDataset(images, labels).transform_first(transforms.ToTensor())
    e = de.Engine("threaded", cpu_threads=2)
    with e:
        with de.record(e) as rec:
            batches = list(DataLoader(ds, batch_size=8))
        e.wait_all()
    assert rec.graph().node_names() == ["gather_batch"] * 3
    lanes = {(n["name"], n["lane"]) for n in json.loads(rec.graph().to_json())["nodes"]}
    assert lanes == {("gather_batch", "copy_to_device")}
    assert [b[0].shape for b in batches] == [(8, 3, 4, 5)] * 2 + [(7, 3, 4, 5)]


def test_other_data_sets_and_transforms_are_batched_sample_by_sample():
    images, labels, _ = data()
    ds = ArrayDataset(images, labels).transform_first(lambda x: x[:2].astype(numpy.float32))
    X, y = next(iter(DataLoader(ds, batch_size=4)))
    assert_same(X, images[:4, :2])
    assert_same(y, labels[:4])
    seen = []
    loader = DataLoader(ArrayDataset(images), batch_size=2,
                        batchify_fn=lambda s: seen.append(len(s)) or len(s))
    assert list(loader)[:2] == [2, 2] and seen[:2] == [2, 2]


def test_index_lists_of_ints_numpy_ints_and_arrays_give_the_same_batch():
    """A batch sampler's list of ints is read by the gather's binding itself; NumPy ints,
    a mixed list, an int64 array and negative indices give the same rows as NumPy's gather."""
    images, labels, _ = data()
    gather = DataLoader(ArrayDataset(images, labels), batch_size=4)._gather
    rows = [3, 0, -1, 22, 7]
    want = [numpy.asarray(images[rows], numpy.float32), numpy.asarray(labels[rows], numpy.float32)]
    for idx in (rows, [numpy.int64(r) for r in rows], rows[:2] + [numpy.int32(-1)] + rows[3:],
                numpy.array(rows, dtype=numpy.int64)):
        if isinstance(idx, list) and not all(type(i) is int for i in idx):
            assert gather(idx) is None  # the DataLoader converts it with NumPy
            idx = numpy.asarray(idx).astype(numpy.int64)
        for got, w in zip(gather(idx), want):
            assert_same(got, w)


def test_errors_name_the_problem():
    images, labels, _ = data()
    ds = ArrayDataset(images, labels)
    with pytest.raises(IndexError, match="index 23 is out of bounds for a data set of 23 samples"):
        next(iter(DataLoader(ds, batch_sampler=[[0, 23]])))
    with pytest.raises(IndexError, match="must be integers"):
        next(iter(DataLoader(ds, batch_sampler=[[0.0, 1.0]])))
    with pytest.raises(IndexError, match="must be integers"):  # bools are no ints here
        next(iter(DataLoader(ds, batch_sampler=[[True, False]])))
    with pytest.raises(IndexError, match="type object; they must be integers"):  # > int64
        next(iter(DataLoader(ds, batch_sampler=[[2 ** 70]])))
    bad = ds.transform_first(transforms.Compose([transforms.ToTensor(),
                                                 transforms.Normalize((0.1, 0.2), 0.5)]))
    with pytest.raises(ValueError, match=r"Normalize's mean has 2 values, but the samples "
                                         r"\(3, 4, 5\) have 3 channels"):
        DataLoader(bad, batch_size=4)
    with pytest.raises(ValueError, match="field 1 has 3 rows, field 0 has 23"):
        _data.BatchGather([(images, False, 0.0, [], []), (labels[:3].astype(numpy.float32),
                                                            False, 0.0, [], [])])
    with pytest.raises(TypeError, match="field 0 must hold uint8 or float32 values"):
        _data.BatchGather([(labels, False, 0.0, [], [])])


FASHION = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not os.path.exists(os.path.join(FASHION, "t10k-labels-idx1-ubyte.gz")),
                    reason="Debian's dataset-fashion-mnist is not installed")
def test_fashion_mnist_batches_as_numpy():
    test = gluon.data.vision.FashionMNIST(train=False)
    t = transforms.Compose([transforms.ToTensor(), transforms.Normalize(0.286, 0.353)])
    numpy.random.seed(11)
    X, y = next(iter(DataLoader(test.transform_first(t), batch_size=64, shuffle=True)))
    numpy.random.seed(11)
    idx = numpy.random.permutation(len(test))[:64]
    images, labels = test[idx]
    want = (images.transpose(0, 3, 1, 2).astype(numpy.float32) / 255.0 - numpy.float32(0.286)) \
        / numpy.float32(0.353)
    assert_same(X, want)
    assert_same(y, labels)
