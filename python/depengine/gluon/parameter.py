"""gluon.Parameter and gluon.ParameterDict, as MXNet 1.9's.

A Parameter holds one array on the engine (its data) and, unless grad_req is 'null', the
gradient array autograd writes (data.attach_grad(grad_req)). A dimension of 0 in its shape is
unknown until the first forward: initialize() then defers the initialization, and the layer
finishes it once the input has shown the shape (MXNet's deferred initialization).
"""
import re
import warnings
from collections import OrderedDict

import numpy as _numpy

from .. import autograd, init as _init, np
from .._depengine import _optim

__all__ = ["Parameter", "ParameterDict", "DeferredInitializationError"]

_GRAD_REQS = ("write", "add", "null")


class DeferredInitializationError(RuntimeError):
    """data() or grad() of a parameter whose initialization waits for its shape."""


def _shape_known(shape):
    return shape is not None and all(int(d) > 0 for d in shape)


class Parameter:
    """A network parameter: its array (data()), its gradient (grad()) and how it starts.

        w = gluon.Parameter('weight', shape=(10, 0), allow_deferred_init=True)
        w.initialize(init.Xavier())     # deferred: the 0 is unknown
        w.shape = (10, 20)              # a layer does this at the first forward ...
        w._finish_deferred_init()       # ... and this
        w.data(), w.grad()

    One device per parameter (ctx may name one; a list of several is refused).
    """

    def __init__(self, name="weight", grad_req="write", shape=None, dtype=_numpy.float32,
                 lr_mult=1.0, wd_mult=1.0, init=None, allow_deferred_init=False,
                 differentiable=True, stype="default", grad_stype="default"):
        if _numpy.dtype(dtype) != _numpy.float32:
            raise TypeError(f"Parameter {name}: only float32 is supported, got {dtype}")
        if stype != "default" or grad_stype != "default":
            raise ValueError(f"Parameter {name}: only the 'default' (dense) storage type is supported")
        self.name = name
        self._shape = None if shape is None else self._as_shape(shape)
        self.dtype = _numpy.float32
        self.lr_mult = lr_mult
        self.wd_mult = wd_mult
        self.init = init
        self._allow_deferred_init = allow_deferred_init
        self._differentiable = differentiable
        self._grad_req = None
        self.grad_req = grad_req if differentiable else "null"
        self._data = None
        self._ctx = None
        self._deferred = None  # (initializer, ctx, default_init) while waiting for the shape
        # Whether data() was read while autograd recorded since the last Trainer step: the
        # gradient is fresh (Trainer's stale-gradient check).
        self._fresh_grad = False

    @staticmethod
    def _as_shape(shape):
        if isinstance(shape, int):
            shape = (shape,)
        return tuple(int(d) for d in shape)

    def __repr__(self):
        return f"Parameter {self.name} (shape={self.shape}, dtype={_numpy.dtype(self.dtype).name})"

    @property
    def shape(self):
        return self._shape

    @shape.setter
    def shape(self, new_shape):
        new_shape = self._as_shape(new_shape)
        if self._shape is not None:
            ok = len(new_shape) == len(self._shape) and all(
                old == 0 or old == new for old, new in zip(self._shape, new_shape))
            if not ok:
                raise ValueError(f"Parameter {self.name}: cannot change its shape from "
                                 f"{self._shape} to {new_shape} (only unknown dimensions, 0, "
                                 "may be set)")
        self._shape = new_shape

    @property
    def grad_req(self):
        return self._grad_req

    @grad_req.setter
    def grad_req(self, req):
        if req not in _GRAD_REQS:
            raise ValueError(f"Parameter {self.name}: grad_req must be 'write', 'add' or 'null', "
                             f"got {req!r}")
        if not self._differentiable:
            req = "null"
        if self._grad_req == req:
            return
        self._grad_req = req
        if getattr(self, "_data", None) is not None:
            self._attach_grad()

    def _attach_grad(self):
        if self._grad_req == "null":
            self._data = self._data.detach()
        else:
            self._data.attach_grad(grad_req=self._grad_req)

    def initialize(self, init=None, ctx=None, default_init=None, force_reinit=False):
        """Draws the initial value: `init`, else this parameter's own init, else
        `default_init` (Uniform(0.07) when none). With an unknown dimension (0) and
        allow_deferred_init, waits for the shape; without, a ValueError."""
        if self._data is not None and not force_reinit:
            warnings.warn(f"Parameter {self.name} is already initialized, ignoring. "
                          "Set force_reinit=True to re-initialize.", stacklevel=2)
            return
        ctx = self._one_ctx(ctx)
        if default_init is None:
            default_init = _init.Uniform()
        if not _shape_known(self._shape):
            if self._allow_deferred_init:
                self._deferred = (init, ctx, default_init)
                self._data = None
                return
            raise ValueError(f"Cannot initialize Parameter {self.name} because it has an "
                             f"invalid shape: {self._shape}")
        self._deferred = (init, ctx, default_init)
        self._finish_deferred_init()

    def _one_ctx(self, ctx):
        if isinstance(ctx, (list, tuple)):
            if len(ctx) != 1:
                raise ValueError(f"Parameter {self.name}: one device per parameter is supported, "
                                 f"got {list(ctx)}")
            ctx = ctx[0]
        return ctx

    def _finish_deferred_init(self):
        """Initializes a parameter whose initialization waited for its shape (no-op when it
        did not wait)."""
        if self._deferred is None:
            return
        if not _shape_known(self._shape):
            raise DeferredInitializationError(
                f"Parameter {self.name} has an unknown shape {self._shape}; it is known after "
                "the first forward")
        init, ctx, default_init = self._deferred
        if init is not None:
            value = _init.create(init)(self.name, self._shape, ctx, own=True)
        elif self.init is not None:
            value = _init.create(self.init)(self.name, self._shape, ctx, own=True)
        else:
            value = _init.create(default_init)(self.name, self._shape, ctx)
        self._deferred = None
        self._set(value, ctx)

    def _set(self, value, ctx):
        self._data = value
        self._ctx = value.ctx if ctx is None else ctx
        if self._grad_req != "null":
            self._data.attach_grad(grad_req=self._grad_req)

    def _check_initialized(self):
        if self._data is not None:
            return
        if self._deferred is not None:
            raise DeferredInitializationError(
                f"Parameter {self.name} has not been initialized yet because initialization "
                "was deferred: its shape is known after the first forward. Call the block on "
                "data first.")
        raise RuntimeError(f"Parameter {self.name} has not been initialized. Note that you "
                           "should initialize parameters and create the Trainer with "
                           "Block.collect_params() instead of Block.params because the "
                           "latter does not include parameters of nested child blocks")

    def data(self, ctx=None):
        """The parameter's array (the one autograd differentiates and the Trainer updates)."""
        self._check_initialized()
        if autograd.is_recording():
            self._fresh_grad = True
        return self._data

    def list_data(self):
        return [self.data()]

    def grad(self, ctx=None):
        """The gradient array (written by backward)."""
        self._check_initialized()
        if self._grad_req == "null":
            raise RuntimeError(f"Cannot get gradient array for Parameter {self.name} because "
                               "grad_req='null'")
        return self._data.grad

    def list_grad(self):
        return [self.grad()]

    def list_ctx(self):
        self._check_initialized()
        return [self._ctx]

    def set_data(self, data):
        """Replaces the value (same shape): the new value is copied into a new array."""
        value = data if isinstance(data, np.ndarray) else np.array(data)
        shape = tuple(value.shape)
        if self._shape is not None and _shape_known(self._shape) and shape != self._shape:
            raise ValueError(f"Parameter {self.name}: set_data of shape {shape}, the parameter "
                             f"has shape {self._shape}")
        self.shape = shape
        self._deferred = None
        self._set(value.copy(), self._ctx)

    def _load(self, value, ctx):
        """Takes a loaded value (a NumPy array of a shape that fits) as the parameter's."""
        self.shape = tuple(value.shape)
        ctx = self._one_ctx(ctx)
        if ctx is None:
            ctx = self._ctx if self._ctx is not None else (
                self._deferred[1] if self._deferred is not None else None)
        self._deferred = None
        self._set(np.array(value, ctx=ctx), ctx)

    def zero_grad(self):
        """Sets the gradient to zeros (one op; NaNs too, unlike grad *= 0)."""
        if self._data is None or self._grad_req == "null":
            return
        _optim.reset_arrays([self._data.grad])

    def reset_ctx(self, ctx):
        ctx = self._one_ctx(ctx)
        if self._data is not None and ctx is not None and ctx != self._ctx:
            self._set(self._data.copyto(ctx), ctx)
        elif self._deferred is not None:
            init, _, default_init = self._deferred
            self._deferred = (init, ctx, default_init)


class ParameterDict:
    """Parameters by name (MXNet 1.9's ParameterDict): what Block.collect_params returns.

        params = net.collect_params()           # or net.collect_params('.*weight')
        params.initialize(init.Normal(0.01)); params.zero_grad()
        for name, p in params.items(): ...
    """

    def __init__(self, prefix="", shared=None):
        self._prefix = prefix
        self._params = OrderedDict()
        self._shared = shared

    def __repr__(self):
        body = "\n".join(f"  {p!r}" for p in self._params.values())
        return f"{self._prefix} (\n{body}\n)" if self._prefix else f"(\n{body}\n)"

    def __getitem__(self, key):
        return self._params[key]

    def __contains__(self, key):
        return key in self._params

    def __iter__(self):
        return iter(self._params)

    def __len__(self):
        return len(self._params)

    def items(self):
        return self._params.items()

    def keys(self):
        return self._params.keys()

    def values(self):
        return self._params.values()

    @property
    def prefix(self):
        return self._prefix

    def _get_impl(self, name):
        if name in self._params:
            return self._params[name]
        if self._shared is not None and name in self._shared._params:
            self._params[name] = self._shared._params[name]
            return self._params[name]
        return None

    def get(self, name, **kwargs):
        """The parameter prefix + name, made with kwargs (Parameter's) if it does not exist;
        of an existing one, a shape given may fill its unknown dimensions (0s)."""
        full = self._prefix + name
        param = self._get_impl(full)
        if param is None:
            param = Parameter(full, **kwargs)
            self._params[full] = param
            return param
        shape = kwargs.get("shape")
        if shape is not None:
            param.shape = shape if param.shape is None else tuple(
                new or old for old, new in zip(param.shape, Parameter._as_shape(shape)))
        return param

    def update(self, other):
        for k, v in other.items():
            if k in self._params and self._params[k] is not v:
                raise ValueError(f"Cannot update self with other because they have different "
                                 f"Parameters with the same name {k!r}")
            self._params[k] = v

    def initialize(self, init=None, ctx=None, verbose=False, force_reinit=False):
        """Initializes every parameter: `init` (default Uniform(0.07)) for those without
        an initializer of their own."""
        default = _init.create(init) if init is not None else _init.Uniform()
        for p in self._params.values():
            p.initialize(None, ctx, default, force_reinit=force_reinit)

    def _load(self, value, ctx):
        """Takes a loaded value (a NumPy array of a shape that fits) as the parameter's."""
        self.shape = tuple(value.shape)
        ctx = self._one_ctx(ctx)
        if ctx is None:
            ctx = self._ctx if self._ctx is not None else (
                self._deferred[1] if self._deferred is not None else None)
        self._deferred = None
        self._set(np.array(value, ctx=ctx), ctx)

    def zero_grad(self):
        _optim.reset_arrays([p._data.grad for p in self._params.values()
                             if p._data is not None and p.grad_req != "null"])

    def reset_ctx(self, ctx):
        for p in self._params.values():
            p.reset_ctx(ctx)

    def setattr(self, name, value):
        """Sets attribute `name` (grad_req, lr_mult, wd_mult, ...) of every parameter."""
        for p in self._params.values():
            setattr(p, name, value)

    def select(self, pattern):
        """The parameters whose full name matches the regular expression (re.match)."""
        rx = re.compile(pattern)
        out = ParameterDict(self._prefix)
        for k, v in self._params.items():
            if rx.match(k):
                out._params[k] = v
        return out

    def list_ctx(self):
        ctxs = []
        for p in self._params.values():
            for c in p.list_ctx():
                if c not in ctxs:
                    ctxs.append(c)
        return ctxs
