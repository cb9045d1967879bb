"""gluon.Trainer, as MXNet 1.9's, over the engine's fused optimizer updates: step() pushes
one op per parameter that reads its gradient and writes the weight and the optimizer's
states (depengine/optim.h), and returns at once.

    trainer = gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.1})
    with autograd.record():
        l = loss(net(X), y)
    l.backward()
    trainer.step(X.shape[0])      # gradients rescaled by 1 / batch_size

Optimizers (MXNet's names, defaults and formulas): 'sgd' (learning_rate=0.01, momentum=0,
wd, clip_gradient, rescale_grad), 'adam' (learning_rate=0.001, beta1=0.9, beta2=0.999,
epsilon=1e-8; bias correction through the learning rate, lr·sqrt(1 - beta2^t) / (1 - beta1^t),
t counted per parameter), 'adadelta' (rho=0.9, epsilon=1e-5; MXNet 1.9's AdaDelta uses no
learning rate), 'rmsprop' (learning_rate=0.001, gamma1=0.9, gamma2=0.9, epsilon=1e-8,
centered=False, clip_weights). Parameters' lr_mult and wd_mult scale lr and wd.
"""
import math

import numpy as _numpy

from .. import np
from .._depengine import _optim
from .parameter import Parameter, ParameterDict

__all__ = ["Trainer", "Optimizer", "SGD", "Adam", "AdaDelta", "RMSProp", "create"]


def _clip(value):
    # MXNet's Python optimizers pass clip_gradient only when truthy; the ops' off is -1.
    return float(value) if value else -1.0


class Optimizer:
    """The hyperparameters every optimizer has, and the per-parameter update count."""

    def __init__(self, rescale_grad=1.0, wd=0.0, clip_gradient=None, learning_rate=0.01,
                 lr_scheduler=None, begin_num_update=0, multi_precision=False, param_dict=None,
                 param_idx2name=None):
        if lr_scheduler is not None:
            raise NotImplementedError("lr_scheduler: use Trainer.set_learning_rate")
        self.rescale_grad = rescale_grad
        self.lr = learning_rate
        self.wd = wd
        self.clip_gradient = clip_gradient
        self.begin_num_update = begin_num_update
        self.num_update = begin_num_update
        self.multi_precision = multi_precision
        self.param_dict = param_dict or {}
        self._index_update_count = {}

    @property
    def learning_rate(self):
        return self.lr

    def set_learning_rate(self, lr):
        self.lr = lr

    def _update_count(self, index):
        count = self._index_update_count.get(index, self.begin_num_update) + 1
        self._index_update_count[index] = count
        self.num_update = max(count, self.num_update)

    def _get_lr(self, index):
        p = self.param_dict.get(index)
        return self.lr * (p.lr_mult if p is not None else 1.0)

    def _get_wd(self, index):
        p = self.param_dict.get(index)
        return self.wd * (p.wd_mult if p is not None else 1.0)

    def create_state(self, index, weight):
        return ()

    def update(self, index, weight, grad, state):
        raise NotImplementedError


def _zeros(weight):
    return np.zeros(weight.shape, ctx=weight.ctx)


class SGD(Optimizer):
    def __init__(self, momentum=0.0, lazy_update=True, **kwargs):
        super().__init__(**kwargs)
        self.momentum = momentum

    def create_state(self, index, weight):
        return (_zeros(weight),) if self.momentum != 0.0 else ()

    def update(self, index, weight, grad, state):
        self._update_count(index)
        kw = dict(lr=self._get_lr(index), wd=self._get_wd(index), rescale_grad=self.rescale_grad,
                  clip_gradient=_clip(self.clip_gradient))
        if state:
            _optim.sgd_mom_update(weight, grad, state[0], momentum=self.momentum, **kw)
        else:
            _optim.sgd_update(weight, grad, **kw)

    def _update_many(self, indices, weights, grads):
        """update() of each parameter without momentum, pushed by one call."""
        for i in indices:
            self._update_count(i)
        _optim.sgd_update_many(weights, grads, lrs=[self._get_lr(i) for i in indices],
                               wds=[self._get_wd(i) for i in indices],
                               rescale_grad=self.rescale_grad,
                               clip_gradient=_clip(self.clip_gradient))


class Adam(Optimizer):
    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 lazy_update=True, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon

    def create_state(self, index, weight):
        return (_zeros(weight), _zeros(weight))

    def update(self, index, weight, grad, state):
        self._update_count(index)
        t = self._index_update_count[index]
        lr = self._get_lr(index) * math.sqrt(1.0 - self.beta2 ** t) / (1.0 - self.beta1 ** t)
        _optim.adam_update(weight, grad, state[0], state[1], lr=lr, beta1=self.beta1,
                           beta2=self.beta2, epsilon=self.epsilon, wd=self._get_wd(index),
                           rescale_grad=self.rescale_grad, clip_gradient=_clip(self.clip_gradient))


class AdaDelta(Optimizer):
    def __init__(self, rho=0.90, epsilon=1e-5, **kwargs):
        super().__init__(**kwargs)
        self.rho = rho
        self.epsilon = epsilon

    def create_state(self, index, weight):
        return (_zeros(weight), _zeros(weight))

    def update(self, index, weight, grad, state):
        self._update_count(index)
        _optim.adadelta_update(weight, grad, state[0], state[1], rho=self.rho,
                               epsilon=self.epsilon, wd=self._get_wd(index),
                               rescale_grad=self.rescale_grad,
                               clip_gradient=_clip(self.clip_gradient))


class RMSProp(Optimizer):
    def __init__(self, learning_rate=0.001, gamma1=0.9, gamma2=0.9, epsilon=1e-8,
                 centered=False, clip_weights=None, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.gamma1 = gamma1
        self.gamma2 = gamma2
        self.epsilon = epsilon
        self.centered = centered
        self.clip_weights = clip_weights

    def create_state(self, index, weight):
        n = 3 if self.centered else 1
        return tuple(_zeros(weight) for _ in range(n))

    def update(self, index, weight, grad, state):
        self._update_count(index)
        kw = dict(lr=self._get_lr(index), gamma1=self.gamma1, epsilon=self.epsilon,
                  wd=self._get_wd(index), rescale_grad=self.rescale_grad,
                  clip_gradient=_clip(self.clip_gradient), clip_weights=_clip(self.clip_weights))
        if self.centered:
            _optim.rmspropalex_update(weight, grad, *state, gamma2=self.gamma2, **kw)
        else:
            _optim.rmsprop_update(weight, grad, state[0], **kw)


_OPTIMIZERS = {"sgd": SGD, "adam": Adam, "adadelta": AdaDelta, "rmsprop": RMSProp}


def create(name, **kwargs):
    """An optimizer by name ('sgd', 'adam', 'adadelta', 'rmsprop'; any case); another name is
    a ValueError."""
    klass = _OPTIMIZERS.get(str(name).lower())
    if klass is None:
        raise ValueError(f"Cannot find optimizer {name!r}; known: {', '.join(sorted(_OPTIMIZERS))}")
    return klass(**kwargs)


class Trainer:
    """Applies an optimizer to a set of parameters (MXNet's gluon.Trainer on one device;
    kvstore and compression_params are accepted and have no effect)."""

    def __init__(self, params, optimizer, optimizer_params=None, kvstore="device",
                 compression_params=None, update_on_kvstore=None):
        if isinstance(params, (dict, ParameterDict)):
            params = list(params.values())
        if not isinstance(params, (list, tuple)):
            raise ValueError("First argument must be a list or dict of Parameters, got "
                             f"{type(params).__name__}.")
        self._params = []
        for p in params:
            if not isinstance(p, Parameter):
                raise ValueError("First argument must be a list or dict of Parameters, got "
                                 f"list of {type(p).__name__}.")
            if any(p is q for q in self._params):
                continue
            self._params.append(p)
        optimizer_params = dict(optimizer_params or {})
        self._scale = optimizer_params.get("rescale_grad", 1.0)
        param_dict = dict(enumerate(self._params))
        if isinstance(optimizer, Optimizer):
            if optimizer_params:
                raise ValueError("optimizer_params must be None if optimizer is an instance of "
                                 "Optimizer instead of str")
            self._optimizer = optimizer
            self._optimizer.param_dict = param_dict
        else:
            self._optimizer = create(optimizer, param_dict=param_dict, **optimizer_params)
        self._states = {}

    @property
    def optimizer(self):
        return self._optimizer

    @property
    def learning_rate(self):
        return self._optimizer.learning_rate

    def set_learning_rate(self, lr):
        self._optimizer.set_learning_rate(lr)

    def step(self, batch_size, ignore_stale_grad=False):
        """One update of every parameter with gradients rescaled by rescale_grad / batch_size
        (one fused op each). A parameter whose gradient was not computed since the last step
        (it was not used in the recorded forward) is an error, unless ignore_stale_grad,
        which skips it."""
        self._optimizer.rescale_grad = self._scale / batch_size
        self._update(ignore_stale_grad)

    def allreduce_grads(self):
        """Nothing to reduce on one device (MXNet's multi-device API)."""

    def update(self, batch_size, ignore_stale_grad=False):
        """step() without allreduce_grads (the same on one device)."""
        self.step(batch_size, ignore_stale_grad)

    def _update(self, ignore_stale_grad):
        to_update = []
        for i, p in enumerate(self._params):
            if p.grad_req == "null":
                continue
            p._check_initialized()
            if not p._fresh_grad:
                if ignore_stale_grad:
                    continue
                raise UserWarning(
                    f"Gradient of Parameter `{p.name}` on context {p.list_ctx()[0]} has not been "
                    "updated by backward since last `step`. This could mean a bug in your "
                    "model that made it only use a subset of the Parameters (Blocks) for this "
                    "iteration. If you are intentionally only using a subset, call step with "
                    "ignore_stale_grad=True to suppress this warning and skip updating of "
                    "Parameters with stale gradient")
            to_update.append((i, p))
        opt = self._optimizer
        states = self._states
        if (type(opt).update is SGD.update and opt.momentum == 0.0
                and not any(states.get(i) for i, _ in to_update)):
            # Plain SGD (no state): every update in one call, the same ops in the same order.
            weights = [p._data for _, p in to_update]
            opt._update_many([i for i, _ in to_update], weights, [w.grad for w in weights])
            for i, p in to_update:
                states.setdefault(i, ())
                p._fresh_grad = False
            return
        for i, p in to_update:
            weight = p._data
            if i not in self._states:
                self._states[i] = opt.create_state(i, weight)
            opt.update(i, weight, weight.grad, self._states[i])
            p._fresh_grad = False

    def save_states(self, fname):
        """Writes the optimizer states and update counts to `fname` (NumPy .npz)."""
        values = {"num_update": _numpy.array(self._optimizer.num_update)}
        for i, st in self._states.items():
            values[f"count_{i}"] = _numpy.array(self._optimizer._index_update_count.get(i, 0))
            for j, s in enumerate(st):
                values[f"state_{i}_{j}"] = s.asnumpy()
        with open(fname, "wb") as f:
            _numpy.savez(f, **values)

    def load_states(self, fname):
        """Reads states written by save_states for the same parameters and optimizer."""
        with _numpy.load(fname, allow_pickle=False) as f:
            data = {k: f[k] for k in f.files}
        states, counts = {}, {}
        for key, value in data.items():
            kind, _, rest = key.partition("_")
            if kind == "count":
                counts[int(rest)] = int(value)
            elif kind == "state":
                i, j = (int(v) for v in rest.split("_"))
                if i >= len(self._params):
                    raise ValueError(f"load_states: {fname} has states of parameter {i}; this "
                                     f"Trainer has {len(self._params)} parameters")
                states.setdefault(i, {})[j] = value
        self._states = {
            i: tuple(np.array(st[j], ctx=self._params[i].list_ctx()[0]) for j in sorted(st))
            for i, st in states.items()}
        self._optimizer._index_update_count = counts
        self._optimizer.num_update = int(data.get("num_update", 0))
