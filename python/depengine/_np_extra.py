"""The mxnet.np functions of d2l's chapters 2-5 that are compositions of bound ops (each op
pushed by C++, gradients recorded there): cumsum, linalg.norm, random.multinomial,
random.shuffle, and npx.save / npx.load."""
import numpy as _numpy

from ._depengine import np as _np


def cumsum(a, axis=None, dtype=None, out=None):
    """numpy.cumsum: a product with a triangular matrix of ones (exact for integers below
    2**24; float sums are rounded as that product's)."""
    if out is not None:
        raise TypeError("cumsum: out= is not supported (the result is a new array)")
    if axis is None:
        a = a.reshape(-1)
        axis = 0
    nd = a.ndim
    if not -nd <= axis < nd:
        raise ValueError(f"cumsum: axis {axis} is out of bounds for an array of dimension {nd}")
    axis %= nd
    n = a.shape[axis]
    tri = _np.array(_numpy.triu(_numpy.ones((n, n), dtype=_numpy.float32)), ctx=a.ctx)
    perm = [d for d in range(nd) if d != axis] + [axis]
    moved = _np.transpose(a, perm) if axis != nd - 1 else a
    r = _np.matmul(moved, tri)
    if axis == nd - 1:
        return r
    inverse = [0] * nd
    for i, d in enumerate(perm):
        inverse[d] = i
    return _np.transpose(r, inverse)


def ndarray_cumsum(self, axis=None, dtype=None, out=None):
    """ndarray.cumsum: numpy.cumsum of the array."""
    return cumsum(self, axis, dtype, out)


def _norm(x, ord=None, axis=None, keepdims=False):
    """numpy.linalg.norm: the 2-norm (Frobenius for matrices), over all elements or `axis`."""
    if ord not in (None, 2, "fro"):
        raise ValueError("linalg.norm: only the 2-norm / Frobenius norm is supported")
    return _np.sqrt(_np.sum(x * x, axis=axis, keepdims=keepdims))


class _Linalg:
    norm = staticmethod(_norm)


linalg = _Linalg()


def _multinomial(n, pvals, size=None):
    """mxnet.np.random.multinomial: counts of `n` draws among len(pvals) outcomes, from the
    engine's generator (so np.random.seed fixes them)."""
    p = _numpy.asarray(pvals, dtype=_numpy.float64)
    if p.ndim != 1 or (p < 0).any() or p.sum() > 1 + 1e-6:
        raise ValueError("multinomial: pvals must be a 1-d sequence of probabilities summing to at most 1")
    shape = () if size is None else ((size,) if isinstance(size, int) else tuple(size))
    edges = _numpy.concatenate([[0.0], _numpy.cumsum(p)])
    edges[-1] = max(edges[-1], 1.0)  # numpy: the last category takes the rest
    lo = _np.array(edges[:-1].astype(_numpy.float32))
    hi = _np.array(edges[1:].astype(_numpy.float32))
    u = _np.random.uniform(0, 1, size=shape + (n, 1))
    hits = (u >= lo) * (u < hi)
    return hits.sum(axis=len(shape))


def _shuffle(x):
    """numpy.random.shuffle: permutes x along its first axis, in place (the permutation from
    NumPy's generator)."""
    perm = _numpy.random.permutation(x.shape[0])
    x[:] = x[_np.array(perm.astype(_numpy.float32), ctx=x.ctx)]


def save(file, arr):
    """mxnet.npx.save: an array, a list of arrays or a dict of them, to one file (.npz)."""
    if isinstance(arr, dict):
        data, kind = {k: v.asnumpy() for k, v in arr.items()}, "dict"
    elif isinstance(arr, (list, tuple)):
        data, kind = {f"a{i}": v.asnumpy() for i, v in enumerate(arr)}, "list"
    else:
        data, kind = {"a0": arr.asnumpy()}, "array"
    with open(file, "wb") as f:
        _numpy.savez(f, __kind__=_numpy.array(kind), **data)


def load(file):
    """mxnet.npx.load: what npx.save wrote (a dict, a list, or one array)."""
    with _numpy.load(file) as z:
        kind = str(z["__kind__"])
        arrays = {k: _np.array(z[k]) for k in z.files if k != "__kind__"}
    if kind == "dict":
        return arrays
    items = [arrays[f"a{i}"] for i in range(len(arrays))]
    return items if kind == "list" else items[0]
