"""gluon.nn's basic layers, as MXNet 1.9's: Sequential, HybridSequential, Dense, Activation,
Dropout, Flatten. Each forward pushes a few engine ops (no per-element Python)."""
from ... import autograd, np, npx
from .. import _ops
from ..block import Block, HybridBlock

__all__ = ["Sequential", "HybridSequential", "Dense", "Activation", "Dropout", "Flatten"]


class _SequentialMixin:
    def add(self, *blocks):
        """Appends blocks, run in order by forward."""
        for block in blocks:
            self.register_child(block)
        return self

    def forward(self, x, *args):
        for block in self._children.values():
            x = block(x, *args)
            args = ()
        return x

    def __getitem__(self, key):
        layers = list(self._children.values())[key]
        if not isinstance(key, slice):
            return layers
        net = type(self)(prefix=self._prefix)
        with net.name_scope():
            net.add(*layers)
        return net

    def __len__(self):
        return len(self._children)


class Sequential(_SequentialMixin, Block):
    """Stacks blocks: net = nn.Sequential(); net.add(nn.Dense(256, activation='relu'),
    nn.Dense(10)). net[i] is the i-th block, net[i:j] a Sequential of those, len(net)."""



class HybridSequential(_SequentialMixin, HybridBlock):
    """Sequential of HybridBlocks, itself hybridizable as a whole."""

    def add(self, *blocks):
        for block in blocks:
            if not isinstance(block, HybridBlock):
                raise ValueError(f"{self.name}: children of a HybridSequential must be "
                                 f"HybridBlocks, got {type(block).__name__}")
        return super().add(*blocks)


_ACTIVATIONS = {
    "relu": npx.relu,
    "sigmoid": npx.sigmoid,
    "tanh": np.tanh,
    "softrelu": _ops.softrelu,
    "softsign": _ops.softsign,
}


class Activation(HybridBlock):
    """An elementwise activation: 'relu', 'sigmoid', 'tanh', 'softrelu' (log(1 + exp(x)))
    or 'softsign' (x / (1 + |x|)). Another name is a ValueError."""

    def __init__(self, activation, **kwargs):
        if activation not in _ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; known: "
                             f"{', '.join(sorted(_ACTIVATIONS))}")
        self._act_type = activation
        super().__init__(**kwargs)

    def _alias(self):
        return self._act_type

    def forward(self, x):
        return _ACTIVATIONS[self._act_type](x)

    def __repr__(self):
        return f"Activation({self._act_type})"


class Dense(HybridBlock):
    """A fully connected layer: out = activation(dot(x, weight.T) + bias), weight of shape
    (units, in_units) and bias (units,). in_units=0 is inferred at the first forward. With
    flatten=True an input (n, d1, d2, ...) is taken as n samples of d1·d2·... features;
    with flatten=False the last axis is the features and the others are kept.

    An input whose feature count differs from in_units is a ValueError naming the layer,
    the input's shape and the weight's."""

    def __init__(self, units, activation=None, use_bias=True, flatten=True, dtype="float32",
                 weight_initializer=None, bias_initializer="zeros", in_units=0, **kwargs):
        super().__init__(**kwargs)
        self._units = int(units)
        self._in_units = int(in_units)
        self._flatten = flatten
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(self._units, self._in_units),
                                          init=weight_initializer, dtype=dtype,
                                          allow_deferred_init=True)
            self.bias = (self.params.get("bias", shape=(self._units,), init=bias_initializer,
                                         dtype=dtype, allow_deferred_init=True)
                         if use_bias else None)
            self.act = (Activation(activation, prefix=activation + "_")
                        if activation is not None else None)

    def forward(self, x):
        shape = x.shape
        w = self.weight
        if len(shape) == 2 and shape[1] and w._shape[1] == shape[1]:  # the common case
            b = self.bias
            act = self.act
            fuse_relu = act is not None and act._act_type == "relu"
            out = _ops.dense(x, w.data(), b.data() if b is not None else None, fuse_relu)
            return act(out) if act is not None and not fuse_relu else out
        ndim = len(shape)
        if self._flatten:
            features = _ops.numel(shape[1:]) if ndim >= 1 else 1
        else:
            features = shape[-1] if ndim else 1
        if w.shape[1] == 0:
            w.shape = (self._units, features)
            w._finish_deferred_init()
            if self.bias is not None:
                self.bias._finish_deferred_init()
        elif w.shape[1] != features:
            raise ValueError(f"{self.name}: an input of shape {tuple(x.shape)} has {features} "
                             f"features per sample, but the weight has shape {w.shape} "
                             f"({w.shape[1]} input features)")
        if self._flatten:
            x2 = x.reshape(x.shape[0], -1) if x.ndim != 2 else x
        else:
            x2 = x.reshape(-1, features)
        fuse_relu = self.act is not None and self.act._act_type == "relu"
        out = _ops.dense(x2, w.data(), self.bias.data() if self.bias is not None else None,
                         relu=fuse_relu)
        if not self._flatten and x.ndim != 2:
            out = out.reshape(tuple(x.shape[:-1]) + (self._units,))
        return self.act(out) if self.act is not None and not fuse_relu else out

    def __repr__(self):
        shape = self.weight.shape
        act = self.act if self.act is not None else "linear"
        return f"Dense({shape[1] if shape[1] else None} -> {shape[0]}, {act})"


class Dropout(HybridBlock):
    """Zeroes each element with probability `rate` and scales the others by
    1 / (1 - rate), only while autograd records in train mode; otherwise the identity. The
    mask comes from the engine's Philox generator, so a seed gives the same masks on any
    schedule."""

    def __init__(self, rate, axes=(), **kwargs):
        super().__init__(**kwargs)
        rate = float(rate)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"Dropout: rate must be in [0, 1), got {rate}")
        if axes:
            raise NotImplementedError("Dropout: axes (masks shared along axes) are not supported")
        self._rate = rate

    def forward(self, x):
        if self._rate == 0.0 or not (autograd.is_recording() and autograd.is_training()):
            return x
        return _ops.dropout(x, self._rate)

    def __repr__(self):
        return f"Dropout(p = {self._rate}, axes=())"


class Flatten(HybridBlock):
    """(n, d1, d2, ...) -> (n, d1·d2·...)."""

    def forward(self, x):
        return x.reshape(x.shape[0], -1)

    def __repr__(self):
        return "Flatten"
