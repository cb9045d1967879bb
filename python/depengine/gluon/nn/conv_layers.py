"""gluon.nn's convolutional layers, as MXNet 1.9's: Conv2D, MaxPool2D, AvgPool2D,
GlobalMaxPool2D, GlobalAvgPool2D and BatchNorm. Each forward pushes one engine op
(npx.convolution, npx.pooling, npx.batch_norm) plus the activation (a ReLU is fused into the
convolution: npx.convolution_relu), so they record and replay under hybridize() like the
basic layers.

Layout NCHW only. MXNet's options that the ops do not implement (another layout, dilation,
groups, ceil_mode, a BatchNorm axis other than the channel axis 1) raise NotImplementedError
naming the layer and the option at construction, never a silently different result. A
shape that does not fit raises ValueError naming the layer and the shapes involved.
"""
import operator

from ... import npx
from .basic_layers import Activation
from ..block import HybridBlock

__all__ = ["Conv2D", "MaxPool2D", "AvgPool2D", "GlobalMaxPool2D", "GlobalAvgPool2D",
           "BatchNorm"]


def _int(value):
    """value as an int if it is one (Python's or NumPy's, not a bool), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _pair(value, cls, name, lo):
    """An int (both sides) or a sequence of two ints, each at least `lo`, as a tuple."""
    single = _int(value)
    if single is not None:
        pair = (single, single)
    else:
        try:
            items = tuple(value)
        except TypeError:
            items = ()
        pair = tuple(_int(v) for v in items)
        if len(pair) != 2 or None in pair:
            raise ValueError(f"{cls}: {name} must be an int or a pair of ints (2-d windows), "
                             f"got {value!r}")
    if any(v < lo for v in pair):
        raise ValueError(f"{cls}: {name} must be at least {lo}, got {value!r}")
    return pair


def _check_layout(cls, layout):
    if layout != "NCHW":
        raise NotImplementedError(f"{cls}: layout {layout!r} is not supported (only 'NCHW')")


def _check_4d(block, x, what):
    if x.ndim != 4:
        raise ValueError(f"{block.name}: {what} expects a 4-d input (N, C, H, W), got shape "
                         f"{tuple(x.shape)}")


def _check_window(block, x, kernel, padding, what):
    padded = (x.shape[2] + 2 * padding[0], x.shape[3] + 2 * padding[1])
    if kernel[0] > padded[0] or kernel[1] > padded[1]:
        raise ValueError(f"{block.name}: {what} {kernel} is larger than the padded input: "
                         f"input of shape {tuple(x.shape)} with padding {padding} is {padded}")


def _call_op(block, op, *args, **kwargs):
    """op(*args, **kwargs), its ValueError (a shape the op refuses) prefixed with the
    layer's name."""
    try:
        return op(*args, **kwargs)
    except ValueError as e:
        raise ValueError(f"{block.name}: {e}") from None


class Conv2D(HybridBlock):
    """2-d convolution (NCHW): out = activation(conv(x, weight) + bias), weight of shape
    (channels, in_channels, kernel_h, kernel_w), bias (channels,). kernel_size, strides,
    padding: an int or a pair. in_channels=0 is inferred at the first forward. The output
    is (N, channels, (H + 2·padding − kernel) // stride + 1, ... ) per spatial side.

        conv = nn.Conv2D(32, kernel_size=3, padding=1, activation='relu')

    dilation other than 1, groups other than 1 and a layout other than 'NCHW' are not
    supported (NotImplementedError)."""

    def __init__(self, channels, kernel_size, strides=(1, 1), padding=(0, 0), dilation=(1, 1),
                 groups=1, layout="NCHW", activation=None, use_bias=True,
                 weight_initializer=None, bias_initializer="zeros", in_channels=0, **kwargs):
        cls = type(self).__name__
        _check_layout(cls, layout)
        self._kernel = _pair(kernel_size, cls, "kernel_size", 1)
        self._strides = _pair(strides, cls, "strides", 1)
        self._padding = _pair(padding, cls, "padding", 0)
        if _pair(dilation, cls, "dilation", 1) != (1, 1):
            raise NotImplementedError(f"{cls}: dilation {dilation!r} is not supported (only 1)")
        if _int(groups) is None or groups < 1:
            raise ValueError(f"{cls}: groups must be a positive int, got {groups!r}")
        if groups != 1:
            raise NotImplementedError(f"{cls}: groups={groups} is not supported (only 1)")
        channels, in_channels = int(channels), int(in_channels)
        if channels < 1 or in_channels < 0:
            raise ValueError(f"{cls}: channels must be positive and in_channels non-negative, "
                             f"got {channels} and {in_channels}")
        super().__init__(**kwargs)
        self._channels = channels
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(channels, in_channels) + self._kernel,
                                          init=weight_initializer, allow_deferred_init=True)
            self.bias = (self.params.get("bias", shape=(channels,), init=bias_initializer,
                                         allow_deferred_init=True)
                         if use_bias else None)
            self.act = (Activation(activation, prefix=activation + "_")
                        if activation is not None else None)

    def _alias(self):
        return "conv"

    def forward(self, x):
        _check_4d(self, x, "Conv2D")
        _check_window(self, x, self._kernel, self._padding, "kernel")
        w = self.weight
        in_channels = x.shape[1]
        if w.shape[1] == 0:
            w.shape = (self._channels, in_channels) + self._kernel
            w._finish_deferred_init()
            if self.bias is not None:
                self.bias._finish_deferred_init()
        elif w.shape[1] != in_channels:
            raise ValueError(f"{self.name}: an input of shape {tuple(x.shape)} has "
                             f"{in_channels} channels, but the weight has shape {w.shape} "
                             f"({w.shape[1]} input channels)")
        bias = self.bias.data() if self.bias is not None else None
        # A ReLU is fused into the convolution (one op, one tape entry, the same bits as
        # relu(convolution)); another activation is a layer of its own.
        fuse_relu = self.act is not None and self.act._act_type == "relu"
        op = npx.convolution_relu if fuse_relu else npx.convolution
        out = _call_op(self, op, x, w.data(), bias, kernel=self._kernel, stride=self._strides,
                       pad=self._padding, num_filter=self._channels, no_bias=bias is None,
                       layout="NCHW")
        return self.act(out) if self.act is not None and not fuse_relu else out

    def __repr__(self):
        shape = self.weight.shape
        s = (f"{type(self).__name__}({shape[1] if shape[1] else None} -> {shape[0]}, "
             f"kernel_size={self._kernel}, stride={self._strides}")
        if self._padding != (0, 0):
            s += f", padding={self._padding}"
        if self.bias is None:
            s += ", bias=False"
        if self.act is not None:
            s += f", {self.act}"
        return s + ")"


class _Pooling(HybridBlock):
    """Max or average pooling over 2-d windows (NCHW); strides default to pool_size."""

    def __init__(self, pool_size, strides, padding, ceil_mode, global_pool, pool_type, layout,
                 count_include_pad=True, **kwargs):
        cls = type(self).__name__
        _check_layout(cls, layout)
        if ceil_mode and not global_pool:
            raise NotImplementedError(f"{cls}: ceil_mode=True (MXNet's 'full' pooling "
                                      "convention) is not supported")
        self._kernel = _pair(pool_size, cls, "pool_size", 1)
        self._strides = self._kernel if strides is None else _pair(strides, cls, "strides", 1)
        self._padding = _pair(padding, cls, "padding", 0)
        self._global = global_pool
        self._ceil_mode = bool(ceil_mode)
        self._type = pool_type
        self._count_include_pad = bool(count_include_pad)
        super().__init__(**kwargs)

    def _alias(self):
        return "pool"

    def forward(self, x):
        _check_4d(self, x, type(self).__name__)
        if not self._global:
            _check_window(self, x, self._kernel, self._padding, "pool_size")
        return _call_op(self, npx.pooling, x, kernel=self._kernel, pool_type=self._type,
                        global_pool=self._global, stride=self._strides, pad=self._padding,
                        count_include_pad=self._count_include_pad, layout="NCHW")

    def __repr__(self):
        return (f"{type(self).__name__}(size={self._kernel}, stride={self._strides}, "
                f"padding={self._padding}, ceil_mode={self._ceil_mode}, "
                f"global_pool={self._global}, pool_type={self._type}, layout=NCHW)")


class MaxPool2D(_Pooling):
    """Max pooling over pool_size windows moved by strides (default: pool_size), the input
    implicitly padded by `padding` on both sides: (N, C, (H + 2·padding − pool) // stride
    + 1, ...). A gradient goes to each window's first maximum."""

    def __init__(self, pool_size=(2, 2), strides=None, padding=0, layout="NCHW",
                 ceil_mode=False, **kwargs):
        super().__init__(pool_size, strides, padding, ceil_mode, False, "max", layout, **kwargs)


class AvgPool2D(_Pooling):
    """Average pooling, as MaxPool2D; with count_include_pad (the default) each window is
    divided by pool_size's area, else by the number of input (not padding) elements in it."""

    def __init__(self, pool_size=(2, 2), strides=None, padding=0, ceil_mode=False,
                 layout="NCHW", count_include_pad=True, **kwargs):
        super().__init__(pool_size, strides, padding, ceil_mode, False, "avg", layout,
                         count_include_pad, **kwargs)


class GlobalMaxPool2D(_Pooling):
    """The maximum of each channel's plane: (N, C, H, W) -> (N, C, 1, 1)."""

    def __init__(self, layout="NCHW", **kwargs):
        super().__init__((1, 1), None, 0, True, True, "max", layout, **kwargs)


class GlobalAvgPool2D(_Pooling):
    """The mean of each channel's plane: (N, C, H, W) -> (N, C, 1, 1)."""

    def __init__(self, layout="NCHW", **kwargs):
        super().__init__((1, 1), None, 0, True, True, "avg", layout, **kwargs)


class BatchNorm(HybridBlock):
    """Batch normalization over the channel axis 1 of (N, C) or (N, C, H, W) (or any
    (N, C, ...)): y = gamma · (x − mean) / sqrt(var + epsilon) + beta per channel.

    In training mode (autograd.record(), whose train_mode is the default, or
    autograd.train_mode()) mean and var are the batch's (var biased) and the running
    statistics are updated in place, as MXNet's:
    running = momentum · running + (1 − momentum) · batch. Otherwise (predict mode), and
    always with use_global_stats, the running statistics normalize. running_mean and
    running_var are parameters with grad_req 'null' (saved and loaded with the others, never
    touched by a Trainer). scale=False fixes gamma at 1 and center=False leaves beta at its
    initial value; neither then gets a gradient. in_channels=0 is inferred at the first
    forward."""

    def __init__(self, axis=1, momentum=0.9, epsilon=1e-5, center=True, scale=True,
                 use_global_stats=False, beta_initializer="zeros", gamma_initializer="ones",
                 running_mean_initializer="zeros", running_variance_initializer="ones",
                 in_channels=0, **kwargs):
        if _int(axis) is None:
            raise ValueError(f"BatchNorm: axis must be an int, got {axis!r}")
        axis = _int(axis)
        if axis != 1 and axis != -1:
            raise NotImplementedError(f"BatchNorm: axis={axis} is not supported (only the "
                                      "channel axis 1 of NCHW; -1 for a 2-d input)")
        super().__init__(**kwargs)
        self._axis = axis
        self._momentum = float(momentum)
        self._epsilon = float(epsilon)
        self._scale = bool(scale)
        self._use_global_stats = bool(use_global_stats)
        in_channels = int(in_channels)
        shape = (in_channels,)
        self.gamma = self.params.get("gamma", grad_req="write" if scale else "null",
                                     shape=shape, init=gamma_initializer,
                                     allow_deferred_init=True, differentiable=bool(scale))
        self.beta = self.params.get("beta", grad_req="write" if center else "null",
                                    shape=shape, init=beta_initializer,
                                    allow_deferred_init=True, differentiable=bool(center))
        self.running_mean = self.params.get("running_mean", grad_req="null", shape=shape,
                                            init=running_mean_initializer,
                                            allow_deferred_init=True, differentiable=False)
        self.running_var = self.params.get("running_var", grad_req="null", shape=shape,
                                           init=running_variance_initializer,
                                           allow_deferred_init=True, differentiable=False)

    def _stats(self):
        return (self.gamma, self.beta, self.running_mean, self.running_var)

    def forward(self, x):
        if x.ndim < 2:
            raise ValueError(f"{self.name}: BatchNorm expects an input (N, C, ...) with a "
                             f"channel axis 1, got shape {tuple(x.shape)}")
        if self._axis == -1 and x.ndim != 2:
            raise NotImplementedError(f"{self.name}: axis=-1 of a {x.ndim}-d input of shape "
                                      f"{tuple(x.shape)} is not supported (only the channel "
                                      "axis 1)")
        channels = x.shape[1]
        if self.gamma.shape[0] == 0:
            for p in self._stats():
                p.shape = (channels,)
                p._finish_deferred_init()
        elif self.gamma.shape[0] != channels:
            raise ValueError(f"{self.name}: an input of shape {tuple(x.shape)} has {channels} "
                             f"channels, but gamma, beta and the running statistics have shape "
                             f"{self.gamma.shape}")
        gamma, beta, mean, var = (p.data() for p in self._stats())
        return _call_op(self, npx.batch_norm, x, gamma, beta, mean, var, eps=self._epsilon,
                        momentum=self._momentum, fix_gamma=not self._scale,
                        use_global_stats=self._use_global_stats, axis=1)

    def __repr__(self):
        channels = self.gamma.shape[0]
        return (f"BatchNorm(axis={self._axis}, eps={self._epsilon}, momentum={self._momentum}, "
                f"fix_gamma={not self._scale}, use_global_stats={self._use_global_stats}, "
                f"in_channels={channels if channels else None})")
