"""gluon.data.vision.MNIST and FashionMNIST, reading local IDX files (no download).

Samples are host-side NumPy arrays, as a data pipeline's: image (28, 28, 1) uint8 and label
int32, as MXNet's (whose are NDArrays of those types); transforms run on them, and the
DataLoader turns each batch into depengine float32 arrays.
"""
import gzip
import os

import numpy as _numpy

from ..dataset import Dataset

__all__ = ["MNIST", "FashionMNIST"]

_FILES = {True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
          False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def _read_idx(path, magic, ndim):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise ValueError(f"{path}: not a readable IDX file ({e})") from None
    header = 4 + 4 * ndim
    if len(raw) < header or int.from_bytes(raw[:4], "big") != magic:
        raise ValueError(f"{path}: not an IDX file of {ndim}-d unsigned bytes (magic "
                         f"{magic:#010x} expected)")
    dims = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    count = int(_numpy.prod(dims, dtype=_numpy.int64))
    if len(raw) - header != count:
        raise ValueError(f"{path}: the header gives shape {dims} ({count} bytes), the file has "
                         f"{len(raw) - header} bytes of data")
    return _numpy.frombuffer(raw, dtype=_numpy.uint8, offset=header).reshape(dims)


class _IdxImages(Dataset):
    _name = None
    _package_hint = None

    def __init__(self, root, train, transform):
        self._root = os.path.expanduser(root)
        self._train = train
        self._transform = transform
        images, labels = (self._find(name) for name in _FILES[bool(train)])
        data = _read_idx(images, 0x00000803, 3)
        label = _read_idx(labels, 0x00000801, 1)
        if data.shape[0] != label.shape[0]:
            raise ValueError(f"{self._name}: {images} has {data.shape[0]} images but {labels} "
                             f"{label.shape[0]} labels")
        self._data = data.reshape(data.shape + (1,))
        self._label = label.astype(_numpy.int32)

    def _find(self, name):
        for candidate in (name + ".gz", name):
            path = os.path.join(self._root, candidate)
            if os.path.exists(path):
                return path
        raise FileNotFoundError(
            f"{self._name}: {os.path.join(self._root, name + '.gz')} (or {name}) not found; "
            f"nothing is downloaded. {self._package_hint}")

    def __len__(self):
        return len(self._label)

    def __getitem__(self, idx):
        if self._transform is not None:
            return self._transform(self._data[idx], self._label[idx])
        return self._data[idx], self._label[idx]

    def _gather_fields(self):
        """(images, labels) for the DataLoader's gather op; None with a transform=."""
        if self._transform is not None:
            return None
        return [(self._data, ()), (self._label, ())]


class FashionMNIST(_IdxImages):
    """Fashion-MNIST from local IDX files (gzipped or not). Default root: Debian's
    dataset-fashion-mnist package (/usr/share/datasets/fashion-mnist)."""

    _name = "FashionMNIST"
    _package_hint = ("Install Debian's dataset-fashion-mnist package (apt-get install "
                     "dataset-fashion-mnist; scripts/install-deps.sh does) or pass root= a "
                     "folder holding the IDX files.")

    def __init__(self, root="/usr/share/datasets/fashion-mnist", train=True, transform=None):
        super().__init__(root, train, transform)


class MNIST(_IdxImages):
    """MNIST from local IDX files (gzipped or not), MXNet's default root ~/.mxnet/datasets/mnist.
    No Debian package provides MNIST: put the four IDX files (train-images-idx3-ubyte.gz, ...)
    there, or pass root=."""

    _name = "MNIST"
    _package_hint = ("No Debian package provides MNIST: put its four IDX files "
                     "(train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
                     "t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz) in that folder or "
                     "pass root= a folder holding them.")

    def __init__(self, root=os.path.join("~", ".mxnet", "datasets", "mnist"), train=True,
                 transform=None):
        super().__init__(root, train, transform)
