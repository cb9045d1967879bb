"""gluon.data.DataLoader and its samplers, as MXNet 1.9's. A batch of an ArrayDataset or a
vision data set (and their transform_first of ToTensor / Normalize / a Compose of them) is
gathered and converted by one engine op on the CPU's copy lane (depengine/batch.h): the loop
pushes it and goes on. Other data sets are batched sample by sample on the host."""
import itertools as _itertools

import numpy as _numpy

from ... import np
from ..._depengine import _data
from .dataset import _gather_fields_of
from .vision import transforms as _transforms

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "BatchSampler", "DataLoader",
           "default_batchify_fn"]


class Sampler:
    def __iter__(self):
        raise NotImplementedError

    def __len__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    """0, 1, ..., length - 1."""

    def __init__(self, length, start=0):
        self._length = length
        self._start = start

    def __iter__(self):
        return iter(range(self._start, self._start + self._length))

    def __len__(self):
        return self._length


class RandomSampler(Sampler):
    """A permutation of range(length) per epoch, from NumPy's global generator (as MXNet's),
    so numpy.random.seed makes the order reproducible."""

    def __init__(self, length):
        self._length = length

    def __iter__(self):
        return iter(_numpy.random.permutation(self._length).tolist())

    def __len__(self):
        return self._length


_LAST_BATCH = ("keep", "discard", "rollover")


class BatchSampler(Sampler):
    """Lists of batch_size indices from `sampler`. The last, shorter batch is kept
    ('keep'), dropped ('discard') or carried into the next epoch's first batch ('rollover')."""

    def __init__(self, sampler, batch_size, last_batch="keep"):
        if last_batch not in _LAST_BATCH:
            raise ValueError(f"last_batch must be one of 'keep', 'discard' or 'rollover', "
                             f"got {last_batch!r}")
        if int(batch_size) <= 0:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
        self._sampler = sampler
        self._batch_size = int(batch_size)
        self._last_batch = last_batch
        self._prev = []

    def __iter__(self):
        # islice takes each batch's indices in C: a Python append per index cost ~100 µs per
        # batch of 256, a Python thread's time that the engine's workers lose on a busy machine.
        batch, self._prev = self._prev, []
        size = self._batch_size
        it = iter(self._sampler)
        batch.extend(_itertools.islice(it, size - len(batch)))
        while len(batch) == size:
            yield batch
            batch = list(_itertools.islice(it, size))
        if batch:
            if self._last_batch == "keep":
                yield batch
            elif self._last_batch == "rollover":
                self._prev = batch

    def __len__(self):
        n = len(self._sampler)
        if self._last_batch == "keep":
            return (n + self._batch_size - 1) // self._batch_size
        if self._last_batch == "discard":
            return n // self._batch_size
        return (len(self._prev) + n) // self._batch_size


def _host_sample(x):
    if isinstance(x, np.ndarray):
        return x.asnumpy()
    return _numpy.asarray(x)


def default_batchify_fn(data):
    """Stacks a list of samples into a batch: tuples field by field, arrays along a new first
    axis; each field becomes one depengine array."""
    first = data[0]
    if isinstance(first, tuple):
        return tuple(default_batchify_fn(list(field)) for field in zip(*data))
    return np.array(_numpy.stack([_host_sample(x) for x in data]).astype(_numpy.float32))


def _gather_plan(fields):
    """The fields of a data set ([(host array, transform steps)]) as BatchGather's
    (array, to_chw, divisor, mean, stddev), or None where the op does not apply the steps as
    NumPy would (the DataLoader then batches sample by sample). Arrays of other numeric types
    than uint8 and float32 are converted to float32 here, once: the values a batch's
    astype(float32) gives."""
    plan = []
    for array, steps in fields:
        a = _numpy.asarray(array)
        if a.dtype.kind not in "biuf" or a.ndim == 0:
            return None
        if a.dtype != _numpy.uint8:
            a = a.astype(_numpy.float32, copy=False)
        sample = a.shape[1:]
        to_chw = bool(steps) and isinstance(steps[0], _transforms.ToTensor)
        if to_chw:
            if len(sample) != 3:
                return None
            sample = (sample[2], sample[0], sample[1])
            steps = steps[1:]
        mean = std = []
        if steps:
            if len(steps) > 1 or not isinstance(steps[0], _transforms.Normalize) or len(sample) != 3:
                return None
            m, d = steps[0]._mean.reshape(-1), steps[0]._std.reshape(-1)
            channels = sample[0]
            for name, v in (("mean", m), ("std", d)):
                if v.size not in (1, channels):
                    raise ValueError(f"DataLoader: Normalize's {name} has {v.size} values, but "
                                     f"the samples {tuple(sample)} have {channels} channels "
                                     f"(give one value, or one per channel)")
            n = max(m.size, d.size)
            mean = _numpy.broadcast_to(m, (n,)).tolist()
            std = _numpy.broadcast_to(d, (n,)).tolist()
        plan.append((_numpy.ascontiguousarray(a), to_chw, 255.0 if to_chw else 0.0, mean, std))
    return plan


class DataLoader:
    """Batches of a dataset (MXNet's DataLoader, in the calling thread: num_workers and the
    other worker options are accepted and have no effect). Without a batchify_fn, an
    ArrayDataset, a vision dataset and those datasets' transform_first(ToTensor/Normalize/
    Compose of them) are batched by one engine op per batch (gather and conversion to
    float32, on the CPU's copy lane; the data set's arrays are copied into it once, here):
    the same values as a NumPy gather and the transforms, with no Python per sample, and the
    loop goes on while the op runs.

        loader = gluon.data.DataLoader(dataset, batch_size=256, shuffle=True)
        for X, y in loader: ...
    """

    def __init__(self, dataset, batch_size=None, shuffle=False, sampler=None, last_batch=None,
                 batch_sampler=None, batchify_fn=None, num_workers=0, pin_memory=False,
                 pin_device_id=0, prefetch=None, thread_pool=False, timeout=120):
        self._dataset = dataset
        if batch_sampler is None:
            if batch_size is None:
                raise ValueError("batch_size must be specified unless batch_sampler is specified")
            if sampler is None:
                sampler = RandomSampler(len(dataset)) if shuffle else SequentialSampler(len(dataset))
            elif shuffle:
                raise ValueError("shuffle must not be specified if sampler is specified")
            batch_sampler = BatchSampler(sampler, batch_size, last_batch if last_batch else "keep")
        elif batch_size is not None or shuffle or sampler is not None or last_batch is not None:
            raise ValueError("batch_size, shuffle, sampler and last_batch must not be specified "
                             "if batch_sampler is specified.")
        self._batch_sampler = batch_sampler
        self._batchify_fn = batchify_fn
        # The gather op's copy of the data set, made here rather than in the first epoch's
        # loop (60,000 Fashion-MNIST images: ~50 ms); None where it does not apply.
        fields = _gather_fields_of(dataset) if batchify_fn is None else None
        plan = _gather_plan(fields) if fields is not None else None
        self._gather = _data.BatchGather(plan) if plan is not None else None

    def __iter__(self):
        for indices in self._batch_sampler:
            if self._gather is not None:
                yield self._gather_batch(indices)
            else:
                samples = [self._dataset[i] for i in indices]
                yield (self._batchify_fn or default_batchify_fn)(samples)

    def _gather_batch(self, indices):
        # A list of ints (what the batch samplers give) is read by the op's binding itself;
        # anything else (or None back from it) goes through NumPy's conversion and checks.
        fields = self._gather(indices) if type(indices) is list else None
        if fields is None:
            idx = _numpy.asarray(indices)
            if idx.size and idx.dtype.kind not in "iu":
                raise IndexError(f"DataLoader: the batch sampler gave indices of type "
                                 f"{idx.dtype}; they must be integers")
            fields = self._gather(idx.astype(_numpy.int64, copy=False))
        return fields[0] if len(fields) == 1 else tuple(fields)

    def __len__(self):
        return len(self._batch_sampler)
