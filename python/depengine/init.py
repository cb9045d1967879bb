"""depengine.init: parameter initializers, as mxnet.init (mxnet.initializer).

    from depengine import init
    net.initialize(init.Xavier(magnitude=2.24))
    nn.Dense(10, weight_initializer=init.Normal(0.01), bias_initializer='zeros')

Values are drawn with the current engine's Philox generator (np.random.*), so the same
np.random.seed gives the same parameters on any engine and any number of workers.

An initializer is called with a parameter's name and shape and returns the new array. As in
MXNet, the name decides what a net-wide initializer does: names ending in 'bias', 'beta',
'running_mean' or 'moving_mean' are zeros, 'gamma', 'running_var' or 'moving_var' ones, and
everything else (weights) gets the initializer's own distribution; an initializer given to
one parameter (Parameter(init=...), weight_initializer=...) applies its distribution
whatever the name.
"""
import math

from . import np

__all__ = ["Initializer", "Uniform", "Normal", "Xavier", "Zero", "One", "Constant", "create",
           "register"]

_registry = {}


def register(klass):
    """Registers an Initializer subclass under its lower-case class name (for create)."""
    _registry[klass.__name__.lower()] = klass
    return klass


def create(init):
    """An Initializer from an instance (returned as is), a registered name ('uniform',
    'normal', 'xavier', 'zeros', 'ones', ...) or None (None). An unknown name is a
    ValueError."""
    if init is None or isinstance(init, Initializer):
        return init
    if isinstance(init, str):
        klass = _registry.get(init.lower())
        if klass is None:
            raise ValueError(f"unknown initializer {init!r}; known: {', '.join(sorted(_registry))}")
        return klass()
    raise TypeError(f"an initializer must be an Initializer or a name, got {type(init).__name__}")


_ZERO_SUFFIXES = ("bias", "beta", "running_mean", "moving_mean")
_ONE_SUFFIXES = ("gamma", "running_var", "moving_var")


class Initializer:
    """The base class: subclasses define _init_weight(name, shape, ctx) -> array."""

    def __init__(self, **kwargs):
        self._kwargs = kwargs

    def __call__(self, name, shape, ctx=None, own=False):
        """The initial value of parameter `name` of `shape`; `own` when this initializer
        was given to that parameter itself (its distribution applies whatever the name)."""
        shape = tuple(int(d) for d in shape)
        if not own:
            if name.endswith(_ZERO_SUFFIXES):
                return np.zeros(shape, ctx=ctx)
            if name.endswith(_ONE_SUFFIXES):
                return np.ones(shape, ctx=ctx)
        return self._init_weight(name, shape, ctx)

    def _init_weight(self, name, shape, ctx):
        raise NotImplementedError(f"{type(self).__name__} must define _init_weight")

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._kwargs.items())
        return f"{type(self).__name__}({args})"


@register
class Zero(Initializer):
    """All zeros."""

    def _init_weight(self, name, shape, ctx):
        return np.zeros(shape, ctx=ctx)


@register
class One(Initializer):
    """All ones."""

    def _init_weight(self, name, shape, ctx):
        return np.ones(shape, ctx=ctx)


@register
class Constant(Initializer):
    """Every element `value`."""

    def __init__(self, value=0.0):
        super().__init__(value=value)
        self.value = float(value)

    def _init_weight(self, name, shape, ctx):
        return np.full(shape, self.value, ctx=ctx)


@register
class Uniform(Initializer):
    """Uniform on [-scale, scale] (the default: scale 0.07)."""

    def __init__(self, scale=0.07):
        super().__init__(scale=scale)
        self.scale = float(scale)

    def _init_weight(self, name, shape, ctx):
        return np.random.uniform(-self.scale, self.scale, size=shape, ctx=ctx)


@register
class Normal(Initializer):
    """Normal with mean 0 and standard deviation sigma (default 0.01)."""

    def __init__(self, sigma=0.01):
        super().__init__(sigma=sigma)
        self.sigma = float(sigma)

    def _init_weight(self, name, shape, ctx):
        return np.random.normal(0.0, self.sigma, size=shape, ctx=ctx)


@register
class Xavier(Initializer):
    """Glorot & Bengio: scale = sqrt(magnitude / factor), factor the average of fan_in and
    fan_out ('avg'), or one of them ('in', 'out'); then uniform on [-scale, scale]
    (rnd_type 'uniform') or normal with standard deviation scale ('gaussian'). fan_in is
    shape[1] and fan_out shape[0], each times the product of shape[2:] (convolution
    kernels). Needs a parameter of at least 2 dimensions."""

    def __init__(self, rnd_type="uniform", factor_type="avg", magnitude=3):
        super().__init__(rnd_type=rnd_type, factor_type=factor_type, magnitude=magnitude)
        if rnd_type not in ("uniform", "gaussian"):
            raise ValueError(f"Xavier: unknown rnd_type {rnd_type!r} (uniform or gaussian)")
        if factor_type not in ("avg", "in", "out"):
            raise ValueError(f"Xavier: unknown factor_type {factor_type!r} (avg, in or out)")
        self.rnd_type = rnd_type
        self.factor_type = factor_type
        self.magnitude = float(magnitude)

    def _init_weight(self, name, shape, ctx):
        if len(shape) < 2:
            raise ValueError(f"Xavier initializer cannot be applied to {name} of shape {shape}: "
                             "it needs at least 2 dimensions")
        hw = math.prod(shape[2:])
        fan_in, fan_out = shape[1] * hw, shape[0] * hw
        factor = {"avg": (fan_in + fan_out) / 2.0, "in": fan_in, "out": fan_out}[self.factor_type]
        scale = math.sqrt(self.magnitude / factor)
        if self.rnd_type == "uniform":
            return np.random.uniform(-scale, scale, size=shape, ctx=ctx)
        return np.random.normal(0.0, scale, size=shape, ctx=ctx)


# MXNet's aliases.
_registry["zeros"] = Zero
_registry["ones"] = One
