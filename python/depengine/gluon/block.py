"""gluon.Block and gluon.HybridBlock, as MXNet 1.9's.

Names follow MXNet 1.x: a block's prefix is its class name and a counter ('dense0_'), nested
under the prefix of the block whose name_scope() it was made in, and its parameters are named
prefix + 'weight'. save_parameters / load_parameters use structural names instead ('0.weight',
'1.bias'), as MXNet's do, so a file loads into any instance of the same architecture.

Hybridization (MXNet's CachedOp on the engine's record/replay segments). A hybridized block
records its forward once per (input shapes, train mode, autograd recording or not) and
afterwards replays it: one C++ call that pushes the recorded ops again, their dependency
edges precomputed, instead of the forward's Python. Each call returns copies of the
segment's outputs, so an output kept from an earlier call is not overwritten by a later
replay. Parameters are read by the segment where they live, so in-place updates
(Trainer.step) are seen by the next replay; a parameter given new storage (set_data,
load_parameters, reset_ctx) or another grad_req starts a new recording.

Outside autograd.record() the forward is an npx.record segment replayed with npx.replay.
Under autograd.record() it is an npx.CachedOp (depengine/cached_op.h): recorded once with
the tape on, it keeps the segment and the tape nodes the forward made (their gradient
functions and saved arrays, which are the segment's arrays); each replay appends one tape
node whose gradient pushes those nodes' gradient ops again in the walk's order, so
loss.backward() gives the same bits as the eager forward (grad_req write/add/null,
retain_graph, Dropout's Philox masks, BatchNorm's running statistics included). A replay
overwrites the arrays the previous call's gradient reads, so while that gradient is not
pushed yet (a second call of the block in one recorded step, or a graph kept with
retain_graph) the call goes to another CachedOp recorded for the same key: a pool per key,
as many as the calls one step makes. A block whose parameters are not all initialized yet
(deferred shapes) runs eagerly once, so that initialization is never recorded into a
segment, and inside a region the user records (npx.record, Engine.record) the block runs
eagerly, its ops recorded into that region. hybrid_stats() counts recordings and replays.
"""
import contextlib
import gc
import re
import threading
import types
import weakref
from collections import OrderedDict

import numpy as _numpy

from .. import autograd, init as _init, np, npx
from .parameter import DeferredInitializationError, Parameter, ParameterDict

__all__ = ["Block", "HybridBlock"]

# What hybrid_forward receives as F: the array namespaces (F.np.dot, F.npx.relu).
_F = types.SimpleNamespace(np=np, npx=npx)

_name_lock = threading.Lock()
_name_counters = {}
_scope_state = threading.local()


class _BlockScope:
    """The naming scope of a block: prefixes of the blocks made inside `with block.name_scope()`."""

    def __init__(self, block):
        self._block = block
        self._counter = {}
        self._old_scope = None

    @staticmethod
    def current():
        return getattr(_scope_state, "scope", None)

    @staticmethod
    def create(prefix, params, hint):
        current = _BlockScope.current()
        if current is None:
            if prefix is None:
                with _name_lock:
                    count = _name_counters.get(hint, 0)
                    _name_counters[hint] = count + 1
                prefix = f"{hint}{count}_"
            params = ParameterDict(prefix) if params is None else ParameterDict(params.prefix, params)
            return prefix, params
        if prefix is None:
            count = current._counter.get(hint, 0)
            current._counter[hint] = count + 1
            prefix = f"{hint}{count}_"
        if params is None:
            parent = current._block.params
            params = ParameterDict(parent.prefix + prefix, parent._shared)
        else:
            params = ParameterDict(params.prefix, params)
        return current._block.prefix + prefix, params

    def __enter__(self):
        if self._block._empty_prefix:
            return self
        self._old_scope = _BlockScope.current()
        _scope_state.scope = self
        return self

    def __exit__(self, *exc):
        if self._block._empty_prefix:
            return
        _scope_state.scope = self._old_scope
        self._old_scope = None


class Block:
    """The base of layers and models: children assigned as attributes are registered,
    parameters are made with self.params.get(name, shape=..., init=...).

        class MLP(gluon.Block):
            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                with self.name_scope():
                    self.hidden = nn.Dense(256, activation='relu')
                    self.output = nn.Dense(10)
            def forward(self, x):
                return self.output(self.hidden(x))
    """

    def __init__(self, prefix=None, params=None):
        self._empty_prefix = prefix == ""
        self._prefix, self._params = _BlockScope.create(prefix, params, self._alias())
        self._name = self._prefix[:-1] if self._prefix.endswith("_") else self._prefix
        self._scope = _BlockScope(self)
        self._children = OrderedDict()
        self._reg_params = OrderedDict()
        self._forward_hooks = []
        self._forward_pre_hooks = []

    def _alias(self):
        return type(self).__name__.lower()

    def __setattr__(self, name, value):
        children = self.__dict__.get("_children")
        if children is not None:
            existing = self.__dict__.get(name)
            if isinstance(existing, (Parameter, Block)) and not isinstance(value, type(existing)):
                raise TypeError(f"Changing attribute type for {name} from {type(existing)} to "
                                f"{type(value)} is not allowed.")
            if isinstance(value, Block):
                self.register_child(value, name)
            elif isinstance(value, Parameter):
                self._reg_params[name] = value
        super().__setattr__(name, value)

    def __repr__(self):
        lines = [f"  ({k}): " + repr(c).replace("\n", "\n  ") for k, c in self._children.items()]
        if not lines:
            return f"{type(self).__name__}()"
        return f"{type(self).__name__}(\n" + "\n".join(lines) + "\n)"

    @property
    def prefix(self):
        return self._prefix

    @property
    def name(self):
        return self._name

    @property
    def params(self):
        """This block's own parameters (not its children's: see collect_params)."""
        return self._params

    def name_scope(self):
        """Blocks and parameters made inside `with self.name_scope():` are named under this
        block's prefix."""
        return self._scope

    def register_child(self, block, name=None):
        if name is None:
            name = str(len(self._children))
        self._children[name] = block

    def register_forward_hook(self, hook):
        """hook(block, inputs, output) after each forward."""
        self._forward_hooks.append(hook)

    def register_forward_pre_hook(self, hook):
        """hook(block, inputs) before each forward."""
        self._forward_pre_hooks.append(hook)

    def _own_params(self):
        own = OrderedDict(self._params.items())
        for p in self._reg_params.values():
            own.setdefault(p.name, p)
        return own

    def collect_params(self, select=None):
        """This block's and its children's parameters, by name; `select` keeps those whose
        name matches the regular expression (re.match), e.g. '.*weight|.*bias'."""
        ret = ParameterDict(self._params.prefix)
        rx = re.compile(select) if select else None
        for name, p in self._own_params().items():
            if rx is None or rx.match(name):
                ret._params.setdefault(name, p)
        for child in self._children.values():
            ret.update(child.collect_params(select=select))
        return ret

    def _collect_params_with_prefix(self, prefix=""):
        if prefix:
            prefix += "."
        ret = OrderedDict((prefix + k, v) for k, v in self._reg_params.items())
        for name, child in self._children.items():
            ret.update(child._collect_params_with_prefix(prefix + name))
        return ret

    def initialize(self, init=None, ctx=None, verbose=False, force_reinit=False):
        """Initializes every parameter of the block and its children (default Uniform(0.07));
        parameters whose shape is not known yet are initialized at the first forward."""
        self.collect_params().initialize(init if init is not None else _init.Uniform(), ctx,
                                         verbose, force_reinit)

    def zero_grad(self):
        self.collect_params().zero_grad()

    def reset_ctx(self, ctx):
        self.collect_params().reset_ctx(ctx)

    def apply(self, fn):
        """Calls fn(block) on every child, recursively, then on this block."""
        for child in self._children.values():
            child.apply(fn)
        fn(self)
        return self

    def cast(self, dtype):
        if _numpy.dtype(dtype) != _numpy.float32:
            raise TypeError(f"{self.name}: only float32 is supported, got {dtype}")

    def hybridize(self, active=True, **kwargs):
        """Hybridizes the HybridBlocks among this block's children (a Block itself is not)."""
        for child in self._children.values():
            child.hybridize(active, **kwargs)

    def save_parameters(self, filename, deduplicate=False):
        """Writes every parameter to `filename` (NumPy .npz, keys structural names such as
        '0.weight'). A parameter not initialized yet is an error naming it."""
        params = self._collect_params_with_prefix()
        values = {}
        seen = {}
        for key, p in params.items():
            if deduplicate and id(p) in seen:
                continue
            seen[id(p)] = key
            try:
                values[key] = p.data().asnumpy()
            except (DeferredInitializationError, RuntimeError) as e:
                raise RuntimeError(f"save_parameters: parameter {key} ({p.name}) has no value "
                                   f"yet: {e}") from None
        with open(filename, "wb") as f:
            _numpy.savez(f, **values)

    def load_parameters(self, filename, ctx=None, allow_missing=False, ignore_extra=False,
                        cast_dtype=False, dtype_source="current"):
        """Loads a file written by save_parameters. Parameters the file lacks (unless
        allow_missing), names in it the block does not have (unless ignore_extra) and shapes
        that differ are errors naming them; then nothing is loaded."""
        try:
            with _numpy.load(filename, allow_pickle=False) as f:
                loaded = {k: f[k] for k in f.files}
        except FileNotFoundError:
            raise
        except (ValueError, OSError) as e:
            raise ValueError(f"load_parameters: {filename} is not a parameter file written by "
                             f"save_parameters ({e})") from None
        params = self._collect_params_with_prefix()
        missing = [k for k in params if k not in loaded]
        if missing and not allow_missing:
            raise ValueError(f"load_parameters: {filename} lacks parameter(s) {', '.join(missing)} "
                             f"of {self.name} (set allow_missing=True to keep their values)")
        extra = [k for k in loaded if k not in params]
        if extra and not ignore_extra:
            raise ValueError(f"load_parameters: {filename} has parameter(s) {', '.join(extra)}, "
                             f"which {self.name} does not have (set ignore_extra=True to skip "
                             "them)")
        for k, p in params.items():
            if k in loaded and p.shape is not None:
                shape = tuple(loaded[k].shape)
                fits = len(shape) == len(p.shape) and all(
                    o == 0 or o == s for o, s in zip(p.shape, shape))
                if not fits:
                    raise ValueError(f"load_parameters: parameter {k} ({p.name}) has shape "
                                     f"{p.shape} in {self.name}, but {shape} in {filename}")
        for k, p in params.items():
            if k in loaded:
                p._load(loaded[k], ctx)

    def forward(self, *args):
        raise NotImplementedError(f"{type(self).__name__} must define forward")

    def __call__(self, *args):
        for hook in self._forward_pre_hooks:
            hook(self, args)
        out = self.forward(*args)
        for hook in self._forward_hooks:
            hook(self, args, out)
        return out


_trace_state = threading.local()


@contextlib.contextmanager
def _tracing_scope():
    """Marks this thread as recording a hybridized forward (its hybridized children run
    eagerly into the recording), with Python's cyclic garbage collector paused: a collection
    inside the recording would free arrays of unreachable blocks (a block and its name scope
    form a cycle), and a delete_var inside a recorded region is refused."""
    enabled = gc.isenabled()
    gc.disable()
    _trace_state.depth = getattr(_trace_state, "depth", 0) + 1
    try:
        yield
    finally:
        _trace_state.depth -= 1
        if enabled:
            gc.enable()


def _tracing():
    return getattr(_trace_state, "depth", 0) > 0


def _copy_out(out):
    if isinstance(out, np.ndarray):
        return out.copy()
    if isinstance(out, (tuple, list)):
        return type(out)(_copy_out(o) for o in out)
    return out


# Recordings of one key whose outputs a caller holds in a way _release cannot undo (a view of
# one is alive) before the block copies its outputs at every call: two serve a loop that
# keeps a view of the latest call's output while it makes the next one, each call replaying
# the recording the one before it left free.
_MAX_HELD = 2


class _Cached:
    """One recorded forward: its segment, its inputs (private copies the replays write), its
    outputs, and the parameter arrays it reads (held, so their ids stay theirs)."""

    def __init__(self, segment, inputs, outputs, arrays):
        self.segment = segment
        self.inputs = inputs
        self.outputs = outputs
        self.arrays = arrays


class HybridBlock(Block):
    """A block whose forward may be recorded once and replayed (hybridize()). Define
    forward(x, ...) with array ops, or MXNet 1.x's hybrid_forward(F, x, ..., **params),
    which receives F (F.np, F.npx) and this block's parameters' arrays by attribute name."""

    def __init__(self, prefix=None, params=None):
        super().__init__(prefix, params)
        self._active = False
        self._param_list = None
        self._cached = {}
        self._cached_ops = {}
        self._copying = set()
        self._handed = {}
        self._records = 0
        self._replays = 0

    def hybridize(self, active=True, **kwargs):
        """Turns recording and replaying of the forward on (or off with active=False);
        MXNet's static_alloc / static_shape are accepted (a segment is both already)."""
        self._active = active
        self._param_list = None
        self._cached = {}
        self._cached_ops = {}
        self._copying = set()
        self._handed = {}
        self._records = 0
        self._replays = 0
        super().hybridize(active, **kwargs)

    def forward(self, x, *args):
        params = {k: p.data() for k, p in self._reg_params.items()}
        return self.hybrid_forward(_F, x, *args, **params)

    def hybrid_forward(self, F, x, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward or hybrid_forward")

    def register_child(self, block, name=None):
        super().register_child(block, name)
        self._param_list = None

    def _hybrid_params(self):
        """collect_params() of a hybridized block, kept between calls (it walks every child):
        a block whose children change below a direct child is hybridize()d again, as in
        MXNet."""
        if self._param_list is None:
            self._param_list = list(self.collect_params().values())
        return self._param_list

    def hybrid_stats(self):
        """{'records': forwards recorded, 'replays': forwards replayed} since hybridize()
        (this block's own calls; a child called inside a recording runs eagerly)."""
        replays = self._replays + sum(op.replays for pool in self._cached_ops.values()
                                      for op, _ in pool)
        return {"records": self._records, "replays": replays}

    def __call__(self, *args):
        # Inside a region recorded by the user (npx.record, Engine.record) the forward's ops
        # go into that region: a segment of the block's own would nest, which records refuse.
        if not self._active or _tracing() or npx._in_record_region():
            return super().__call__(*args)
        if not all(isinstance(a, np.ndarray) for a in args):
            return super().__call__(*args)
        params = self._hybrid_params()
        if any(p._data is None for p in params):
            return super().__call__(*args)
        if autograd.is_recording():
            return self._call_cached_op(args, params)
        key = (tuple(a.shape for a in args), autograd.is_training(),
               tuple(id(p._data) for p in params))
        entry = self._cached.get(key)
        if entry is None:
            entry = self._record(args, params)
            self._cached[key] = entry
        else:
            npx.replay(entry.segment, list(args))
            self._replays += 1
        return _copy_out(entry.outputs)

    def _record(self, args, params):
        inputs = [a.copy() for a in args]
        box = {}

        def run():
            box["out"] = Block.__call__(self, *inputs)

        with _tracing_scope():
            segment = npx.record(run, inputs=inputs)
        self._records += 1
        return _Cached(segment, inputs, box["out"], [p._data for p in params])

    def _call_cached_op(self, args, params):
        arrays = [p.data() for p in params]  # data(): marks their gradients fresh (Trainer)
        with_grad = [npx._has_history(a) for a in args]
        key = (tuple(a.shape for a in args), autograd.is_training(), tuple(with_grad),
               tuple(id(d) for d in arrays), tuple(p.grad_req for p in params))
        pool = self._cached_ops.setdefault(key, [])
        held = 0
        for op, tree in pool:
            if op.busy:
                continue
            if op.held and not self._release(op):
                held += 1
                continue
            break
        else:
            if held >= _MAX_HELD:
                # The caller keeps the outputs of more than its latest call: this key's calls
                # copy their outputs from now on, so that the pool does not grow by a
                # recording per call.
                self._copying.add(key)
            op, tree = self._record_cached_op(args, arrays, with_grad)
            pool.append((op, tree))
        # The outputs are the segment's own arrays (no copy); one that the caller still holds
        # at the next call gets a copy of its own then (_release).
        copying = key in self._copying
        outs = op(list(args), arrays, copying)
        if not copying:
            self._handed[id(op)] = [weakref.ref(o) for o in outs]
        return _unflatten(tree, outs)

    def _release(self, op):
        """Unholds `op` when the only handles to the outputs its latest call returned are
        those Python objects: they get copies of their own (what a caller that keeps its
        outputs across calls pays; the others pay nothing). Not when a view of one, or a
        copy of its handle inside another object, is alive."""
        alive = [o for o in (r() for r in self._handed.get(id(op), ())) if o is not None]
        return op._release(alive)

    def _record_cached_op(self, args, arrays, with_grad):
        inputs = [a.detach().copy() for a in args]
        box = {}

        def run(*marked):
            flat = []
            box["tree"] = _flatten(Block.__call__(self, *marked), flat, self.name)
            return flat

        with _tracing_scope():
            op = npx.CachedOp.record(self.name, run, inputs, with_grad, arrays)
        self._records += 1
        return op, box["tree"]


def _flatten(out, flat, name):
    """Appends the arrays of a forward's result (an ndarray or nested tuples/lists of them)
    to `flat`; returns its structure for _unflatten."""
    if isinstance(out, np.ndarray):
        flat.append(out)
        return None
    if isinstance(out, (tuple, list)):
        return (type(out), [_flatten(o, flat, name) for o in out])
    raise TypeError(f"{name}: a hybridized forward must return ndarrays (or tuples/lists of "
                    f"them) while autograd records, got {type(out).__name__}")


def _unflatten(tree, flat):
    """The forward's result rebuilt from its structure and its arrays. (No recursive closure:
    its reference cycle would keep the outputs, hence the call's tape node, alive until a
    garbage collection, and the CachedOp busy.)"""
    return _build(tree, iter(flat))


def _build(tree, it):
    if tree is None:
        return next(it)
    kind, items = tree
    return kind(_build(t, it) for t in items)
