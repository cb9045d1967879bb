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


class _LazyTransformDataset(Dataset):
    def __init__(self, data, fn):
        self._data = data
        self._fn = fn

    def __len__(self):
        return len(self._data)

    def __getitem__(self, idx):
        item = self._data[idx]
        return self._fn(*item) if isinstance(item, tuple) else self._fn(item)

    def _gather_fields(self):
        """The fields of the data set below with this transform added to the steps of the
        field it applies to (the first, for transform_first or a one-field data set), or None
        when it is not a chain of the vision transforms that the DataLoader's gather op
        applies (see _gather_fields of ArrayDataset)."""
        fields = _gather_fields_of(self._data)
        if fields is None:
            return None
        fn = self._fn
        if isinstance(fn, _TransformFirst):
            fn = fn._fn
        elif len(fields) != 1:
            return None
        steps = _steps(fn)
        if steps is None:
            return None
        array, before = fields[0]
        return [(array, before + steps)] + fields[1:]


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
    ArrayDataset (and its transform_first of vision transforms) with one engine op per batch
    instead of one gather per sample."""

    def __init__(self, *args):
        if not args:
            raise ValueError("ArrayDataset needs at least one array")
        self._length = len(args[0])
        for i, a in enumerate(args):
            if len(a) != self._length:
                raise ValueError(f"ArrayDataset: all arrays must have the same length; array "
                                 f"{i} has {len(a)}, array 0 has {self._length}")
        self._data = args

    def __len__(self):
        return self._length

    def __getitem__(self, idx):
        if len(self._data) == 1:
            return self._data[0][idx]
        return tuple(a[idx] for a in self._data)

    def _gather_fields(self):
        """[(host array, transform steps)] per field: what the DataLoader's gather op reads
        (the host arrays are copied into it once, when a DataLoader is made)."""
        return [(_host(a), ()) for a in self._data]


def _gather_fields_of(dataset):
    """dataset._gather_fields() where the data set has it, else None."""
    fields = getattr(dataset, "_gather_fields", None)
    return fields() if fields is not None else None


def _steps(fn):
    """A transform as a tuple of vision transforms (ToTensor, Normalize; a Compose of them
    flattened), or None for any other callable."""
    from .vision import transforms
    if isinstance(fn, (transforms.ToTensor, transforms.Normalize)):
        return (fn,)
    if isinstance(fn, transforms.Compose):
        steps = ()
        for t in fn._transforms:
            more = _steps(t)
            if more is None:
                return None
            steps += more
        return steps
    return None
