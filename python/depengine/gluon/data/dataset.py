"""gluon.data datasets, as MXNet 1.9's: Dataset (transform, transform_first), SimpleDataset,
ArrayDataset."""
import numpy as _numpy

from ... import np

__all__ = ["Dataset", "SimpleDataset", "ArrayDataset"]


class Dataset:
    """Samples by index: define __getitem__ and __len__."""

    def __getitem__(self, idx):
        raise NotImplementedError

    def __len__(self):
        raise NotImplementedError

    def transform(self, fn, lazy=True):
        """A dataset of fn(*sample) (fn(sample) for a sample that is not a tuple); lazy=False
        applies it to every sample now."""
        trans = _LazyTransformDataset(self, fn)
        return trans if lazy else SimpleDataset([trans[i] for i in range(len(trans))])

    def transform_first(self, fn, lazy=True):
        """A dataset whose samples' first element is fn(first element); the rest (labels)
        unchanged."""
        return self.transform(_TransformFirst(fn), lazy)


class _TransformFirst:
    def __init__(self, fn):
        self._fn = fn

    def __call__(self, x, *args):
        return (self._fn(x),) + args if args else self._fn(x)

    @property
    def batchable(self):
        return getattr(self._fn, "batchable", False)


class _LazyTransformDataset(Dataset):
    def __init__(self, data, fn):
        self._data = data
        self._fn = fn

    def __len__(self):
        return len(self._data)

    def __getitem__(self, idx):
        item = self._data[idx]
        return self._fn(*item) if isinstance(item, tuple) else self._fn(item)

    def _batch(self, indices):
        """The batch's fields as host arrays, the transform applied to the whole batch at once
        (DataLoader's fast path), or None when the transform works on one sample only."""
        gather = getattr(self._data, "_batch", None)
        if gather is None or not getattr(self._fn, "batchable", False):
            return None
        fields = gather(indices)
        if fields is None:
            return None
        return [self._fn._fn(fields[0])] + list(fields[1:])


class SimpleDataset(Dataset):
    """A dataset over a list (or anything indexable with len)."""

    def __init__(self, data):
        self._data = data

    def __len__(self):
        return len(self._data)

    def __getitem__(self, idx):
        return self._data[idx]


def _host(a):
    """A NumPy view of one field of an ArrayDataset (converted once, for batching)."""
    if isinstance(a, np.ndarray):
        return a.asnumpy()
    return _numpy.asarray(a)


class ArrayDataset(Dataset):
    """Samples zipped from arrays of equal length (depengine or NumPy arrays, lists):
    dataset[i] is (a[i], b[i], ...), or a[i] for one array. DataLoader batches an
    ArrayDataset with one gather per field instead of one per sample."""

    def __init__(self, *args):
        if not args:
            raise ValueError("ArrayDataset needs at least one array")
        self._length = len(args[0])
        for i, a in enumerate(args):
            if len(a) != self._length:
                raise ValueError(f"ArrayDataset: all arrays must have the same length; array "
                                 f"{i} has {len(a)}, array 0 has {self._length}")
        self._data = args
        self._hosts = None

    def __len__(self):
        return self._length

    def __getitem__(self, idx):
        if len(self._data) == 1:
            return self._data[0][idx]
        return tuple(a[idx] for a in self._data)

    def _batch(self, indices):
        """The batch's fields as host arrays: one gather per field (DataLoader's fast path)."""
        if self._hosts is None:
            self._hosts = [_host(a) for a in self._data]
        return [h[indices] for h in self._hosts]
