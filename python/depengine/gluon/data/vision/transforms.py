"""gluon.data.vision.transforms: ToTensor, Normalize, Compose (MXNet 1.9's), on host images
(NumPy arrays; a depengine array is copied to the host first)."""
import numpy as _numpy

from .... import np

__all__ = ["Compose", "ToTensor", "Normalize"]


def _host(x):
    return x.asnumpy() if isinstance(x, np.ndarray) else _numpy.asarray(x)


class Compose:
    """Applies transforms in order."""

    def __init__(self, transforms):
        self._transforms = list(transforms)

    def __call__(self, x):
        for t in self._transforms:
            x = t(x)
        return x


class ToTensor:
    """(H, W, C) (or a batch (N, H, W, C)) uint8 in [0, 255] -> (C, H, W) float32 in [0, 1]."""

    def __call__(self, x):
        a = _host(x)
        if a.ndim not in (3, 4):
            raise ValueError(f"ToTensor: expected an image (H, W, C) or a batch (N, H, W, C), "
                             f"got shape {a.shape}")
        axes = (2, 0, 1) if a.ndim == 3 else (0, 3, 1, 2)
        return (a.transpose(axes).astype(_numpy.float32) / 255.0).astype(_numpy.float32)


class Normalize:
    """(x - mean) / std per channel of a (C, H, W) (or (N, C, H, W)) tensor; mean and std
    are numbers or one per channel."""

    def __init__(self, mean=0.0, std=1.0):
        self._mean = _numpy.asarray(mean, dtype=_numpy.float32)
        self._std = _numpy.asarray(std, dtype=_numpy.float32)

    def __call__(self, x):
        a = _host(x).astype(_numpy.float32, copy=False)
        if a.ndim not in (3, 4):
            raise ValueError(f"Normalize: expected a tensor (C, H, W) or (N, C, H, W), got shape "
                             f"{a.shape}")
        shape = (-1, 1, 1)
        mean = self._mean.reshape(shape) if self._mean.ndim else self._mean
        std = self._std.reshape(shape) if self._std.ndim else self._std
        return ((a - mean) / std).astype(_numpy.float32)
