"""Private: the array functions gluon needs that depengine.np / npx do not have yet.

Each is written from existing bound ops (one C++ op per call, no per-element Python), and
each is a swap point: where the native op exists (npx.softmax, npx.log_softmax and npx.pick
from the CNN work, for the last axis of a 2-d array; npx.dropout once it lands), the function
below calls it by name for the cases it covers and composes the rest. Gluon code calls only
these names, never the composites directly.
"""
import math as _math


from .. import np, npx
from .._depengine import _gluon


def _native(name):
    return getattr(npx, name, None)


def dense(x, weight, bias, relu=False):
    """relu?(x (n, in) · weight (units, in)ᵀ + bias (units,)): MXNet's FullyConnected. On the
    CPU one fused op (and one tape entry); elsewhere composed of np ops."""
    out = _gluon.fully_connected(x, weight, bias, relu)  # None off the CPU
    if out is not None:
        return out
    out = np.dot(x, weight.T)
    out = out if bias is None else out + bias
    return npx.relu(out) if relu else out


def softmax_cross_entropy(pred, label, from_logits):
    """Per-row -log softmax(pred)[label] of a 2-d pred on the CPU (one fused op, a label out
    of range fails at the blocker), shape (n,); None where that op does not apply."""
    if pred.ndim != 2:
        return None
    return _gluon.softmax_cross_entropy(pred, label if label.ndim == 1 else label.reshape(-1),
                                        from_logits)


def _last(x, axis):
    return x.ndim > 0 and axis % x.ndim == x.ndim - 1


def log_softmax(x, axis=-1):
    native = _native("log_softmax")
    if native is not None and _last(x, axis):  # the native op: the last axis only
        return native(x, axis=-1)
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def softmax(x, axis=-1):
    native = _native("softmax")
    if native is not None and _last(x, axis):
        return native(x, axis=-1)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def softrelu(x):
    """log(1 + exp(x)), computed as max(x, 0) + log(1 + exp(-|x|)) so that it does not
    overflow for large x (MXNet's softrelu)."""
    return np.maximum(x, 0.0) + np.log(1.0 + np.exp(-np.abs(x)))


def softsign(x):
    return x / (1.0 + np.abs(x))


def pick(data, index, axis=-1):
    """data's element at `index` along `axis`, that axis kept with length 1 (npx.pick with
    keepdims=True). The composite compares `index` with every class index: an index out of
    range picks nothing (0) instead of failing."""
    native = _native("pick")
    if native is not None and data.ndim == 2 and _last(data, axis):  # native: 2-d, last axis
        return native(data, index.reshape(-1), axis=-1, keepdims=True)
    nd = data.ndim
    ax = axis % nd
    classes_shape = [1] * nd
    classes_shape[ax] = data.shape[ax]
    classes = np.arange(data.shape[ax], ctx=data.ctx).reshape(tuple(classes_shape))
    index_shape = list(data.shape)
    index_shape[ax] = 1
    onehot = index.reshape(tuple(index_shape)) == classes
    return (data * onehot).sum(axis=ax, keepdims=True)


def dropout(x, rate):
    """Inverted dropout: each element kept with probability 1 - rate and scaled by
    1 / (1 - rate); the mask from the engine's Philox generator (np.random.uniform)."""
    native = _native("dropout")
    if native is not None:
        return native(x, p=rate)
    keep = np.random.uniform(0.0, 1.0, size=x.shape, ctx=x.ctx) >= rate
    return x * (keep * (1.0 / (1.0 - rate)))


def mean_except(x, axis):
    """The mean over every axis but `axis` (MXNet's mean(x, axis=axis, exclude=True)); a
    1-d x is returned as it is."""
    if x.ndim <= 1:
        return x
    ax = axis % x.ndim
    if x.size == x.shape[ax]:  # every other axis has length 1: nothing to average
        return x.reshape(x.shape[ax])
    if ax == 0:
        return x.reshape(x.shape[0], -1).mean(axis=1)
    if ax == x.ndim - 1:
        return x.reshape(-1, x.shape[-1]).mean(axis=0)
    raise NotImplementedError(
        f"a batch axis ({axis}) between the first and the last of a {x.ndim}-d loss")


def zeros_like(a):
    return np.zeros(a.shape, ctx=a.ctx)


def numel(shape):
    return _math.prod(shape)
