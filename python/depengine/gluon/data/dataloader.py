"""gluon.data.DataLoader and its samplers, as MXNet 1.9's. Batches are assembled on the host
(NumPy) and become one depengine array per field (one copy op each)."""
import numpy as _numpy

from ... import np

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
        batch, self._prev = self._prev, []
        for i in self._sampler:
            batch.append(i)
            if len(batch) == self._batch_size:
                yield batch
                batch = []
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


class DataLoader:
    """Batches of a dataset (MXNet's DataLoader, in the calling thread: num_workers and the
    other worker options are accepted and have no effect). Without a batchify_fn, an
    ArrayDataset, a vision dataset and those datasets' transform_first(ToTensor/Normalize/
    Compose of them) are batched with one gather per field and the transform applied to the
    whole batch, instead of sample by sample: the same values, in far less Python.

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

    def __iter__(self):
        for indices in self._batch_sampler:
            yield self._batch(indices)

    def _batch(self, indices):
        gather = getattr(self._dataset, "_batch", None)
        if self._batchify_fn is None and gather is not None:
            fields = gather(_numpy.asarray(indices, dtype=_numpy.int64))
            if fields is not None:
                fields = [np.array(_numpy.asarray(f).astype(_numpy.float32, copy=False))
                          for f in fields]
                return fields[0] if len(fields) == 1 else tuple(fields)
        samples = [self._dataset[i] for i in indices]
        return (self._batchify_fn or default_batchify_fn)(samples)

    def __len__(self):
        return len(self._batch_sampler)
