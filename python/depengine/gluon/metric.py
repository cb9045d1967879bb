"""gluon.metric: evaluation metrics with MXNet's names (`mxnet.metric` in 1.9,
`mxnet.gluon.metric` in 2.0) whose updates do not block.

MXNet's metrics read every update back (`asnumpy`), so each `update` waits for the batch's
forward pass. Here an update pushes its arithmetic as engine ops into a running total that
lives in an array, and only `get()` waits for it:

    acc, loss = gluon.metric.Accuracy(), gluon.metric.Loss()
    for X, y in loader:
        ...                         # z = net(X), l = loss_fn(z, y), backward, trainer.step
        acc.update(y, z)            # one op (CPU arrays): the count of correct rows
        loss.update(None, l)        # one op: the sum of the losses
    print(acc.get(), loss.get())    # the blockers

For CPU arrays of the usual shapes (predictions (batch, classes), labels (batch,)) an update
is one fused op; otherwise it is composed of np ops whose per-update results are summed at
`get()`.
"""
from .. import np
from .._depengine import _gluon

__all__ = ["EvalMetric", "Accuracy", "Loss", "MAE", "MSE", "CompositeEvalMetric", "create"]


def _as_list(x, who, what):
    if isinstance(x, (list, tuple)):
        return list(x)
    if x is None:
        raise TypeError(f"{who}.update: {what} is None")
    return [x]


class EvalMetric:
    """The base: `update(labels, preds)`, `get()` -> (name, value), `reset()`.

    A subclass adds to the running total with `_add(x)` (x's elements summed) or
    `_add_correct(pred, label)` and counts instances in `num_inst` (a Python int: shapes are
    known when an op is pushed). `get()` is the blocker."""

    def __init__(self, name, output_names=None, label_names=None, **kwargs):
        self.name = str(name)
        self.output_names = output_names
        self.label_names = label_names
        self._kwargs = kwargs
        self.reset()

    def __str__(self):
        return f"EvalMetric: {dict(self.get_name_value())}"

    def reset(self):
        """Forgets every update (what is pushed still runs, into a total no longer read)."""
        self.num_inst = 0
        self._total = None      # a (1,) array on the updates' engine, once there is one
        self._pending = []      # per-update sums composed of np ops (other devices, shapes)

    @property
    def sum_metric(self):
        """The running total (a blocker), as MXNet's attribute."""
        s = 0.0 if self._total is None else float(self._total.item())
        return s + sum(float(p.item()) for p in self._pending)

    def _total_for(self, like):
        if self._total is None:
            self._total = np.zeros_like(like.reshape(-1)[0:1])
        return self._total

    def _add(self, x):
        if x.size == 0:
            return
        if not _gluon.add_sum(self._total_for(x), x):
            self._pending.append(x.sum())

    def _add_correct(self, pred, label):
        if label.size == 0:
            return
        if not _gluon.add_count_correct(self._total_for(label), pred, label):
            self._pending.append((pred.argmax(axis=1) == label).sum())

    def update(self, labels, preds):
        raise NotImplementedError(f"{type(self).__name__}.update")

    def update_dict(self, label, pred):
        """update() with dicts of name -> array, ordered by output_names / label_names."""
        preds = [pred[n] for n in self.output_names] if self.output_names else list(pred.values())
        labels = ([label[n] for n in self.label_names] if self.label_names
                  else list(label.values()))
        self.update(labels, preds)

    def get(self):
        """(name, value); value is nan before the first update. Waits for the updates."""
        if self.num_inst == 0:
            return self.name, float("nan")
        return self.name, self.sum_metric / self.num_inst

    def get_name_value(self):
        name, value = self.get()
        if not isinstance(name, list):
            name, value = [name], [value]
        return list(zip(name, value))

    def get_config(self):
        config = dict(self._kwargs)
        config.update({"metric": type(self).__name__, "name": self.name,
                       "output_names": self.output_names, "label_names": self.label_names})
        return config


class Accuracy(EvalMetric):
    """The share of predictions equal to their label. A prediction whose shape differs from
    its label's is reduced by argmax over `axis` (the first maximum, as np.argmax)."""

    def __init__(self, axis=1, name="accuracy", output_names=None, label_names=None):
        super().__init__(name, output_names=output_names, label_names=label_names, axis=axis)
        self.axis = axis

    def update(self, labels, preds):
        labels = _as_list(labels, "Accuracy", "labels")
        preds = _as_list(preds, "Accuracy", "preds")
        if len(labels) != len(preds):
            raise ValueError(f"Accuracy.update: {len(labels)} labels and {len(preds)} "
                             "predictions; give one label per prediction")
        for label, pred in zip(labels, preds):
            pshape, lshape = tuple(pred.shape), tuple(label.shape)
            if pshape != lshape:
                rows = label.reshape(-1)
                if (self.axis in (1, -1) and len(pshape) == 2 and rows.size == pshape[0]):
                    self._add_correct(pred, rows)
                    self.num_inst += rows.size
                    continue
                pred = pred.argmax(axis=self.axis)
                if pred.size != label.size:
                    raise ValueError(f"Accuracy.update: predictions of shape {pshape} reduce "
                                     f"over axis {self.axis} to {tuple(pred.shape)}, which does "
                                     f"not fit labels of shape {lshape}")
            self._add(pred.reshape(-1) == label.reshape(-1))
            self.num_inst += label.size


class Loss(EvalMetric):
    """The mean of the losses given as `preds` (labels are ignored)."""

    def __init__(self, name="loss", output_names=None, label_names=None):
        super().__init__(name, output_names=output_names, label_names=label_names)

    def update(self, _, preds):
        for pred in _as_list(preds, "Loss", "preds"):
            self._add(pred)
            self.num_inst += pred.size


class _Elementwise(EvalMetric):
    def update(self, labels, preds):
        labels = _as_list(labels, type(self).__name__, "labels")
        preds = _as_list(preds, type(self).__name__, "preds")
        if len(labels) != len(preds):
            raise ValueError(f"{type(self).__name__}.update: {len(labels)} labels and "
                             f"{len(preds)} predictions")
        for label, pred in zip(labels, preds):
            if label.size != pred.size:
                raise ValueError(f"{type(self).__name__}.update: labels of shape "
                                 f"{tuple(label.shape)} do not fit predictions of shape "
                                 f"{tuple(pred.shape)}")
            if label.size == 0:
                continue
            # MXNet's: the mean of each update, averaged over the updates.
            self._add(self._error(label.reshape(pred.shape) - pred).mean())
            self.num_inst += 1


class MAE(_Elementwise):
    """Mean absolute error (per update, then averaged over updates, as MXNet)."""

    def __init__(self, name="mae", output_names=None, label_names=None):
        super().__init__(name, output_names=output_names, label_names=label_names)

    @staticmethod
    def _error(d):
        return np.abs(d)


class MSE(_Elementwise):
    """Mean squared error (per update, then averaged over updates, as MXNet)."""

    def __init__(self, name="mse", output_names=None, label_names=None):
        super().__init__(name, output_names=output_names, label_names=label_names)

    @staticmethod
    def _error(d):
        return d * d


class CompositeEvalMetric(EvalMetric):
    """Several metrics updated together; get() gives lists of names and values."""

    def __init__(self, metrics=None, name="composite", output_names=None, label_names=None):
        self.metrics = [create(m) for m in (metrics or [])]
        super().__init__(name, output_names=output_names, label_names=label_names)

    def add(self, metric):
        self.metrics.append(create(metric))

    def get_metric(self, index):
        return self.metrics[index]

    def reset(self):
        super().reset()
        for m in getattr(self, "metrics", []):
            m.reset()

    def update(self, labels, preds):
        for m in self.metrics:
            m.update(labels, preds)

    def get(self):
        names, values = [], []
        for m in self.metrics:
            for n, v in m.get_name_value():
                names.append(n)
                values.append(v)
        return names, values


_NAMES = {"acc": Accuracy, "accuracy": Accuracy, "loss": Loss, "mae": MAE, "mse": MSE,
          "composite": CompositeEvalMetric}


def create(metric, *args, **kwargs):
    """A metric from a name ('acc', 'loss', 'mae', 'mse'), an EvalMetric (returned as is) or
    a list of those (a CompositeEvalMetric)."""
    if isinstance(metric, EvalMetric):
        return metric
    if isinstance(metric, (list, tuple)):
        return CompositeEvalMetric([create(m) for m in metric], *args, **kwargs)
    if isinstance(metric, str):
        cls = _NAMES.get(metric.lower())
        if cls is None:
            raise ValueError(f"metric.create: unknown metric {metric!r}; known: "
                             f"{', '.join(sorted(_NAMES))}")
        return cls(*args, **kwargs)
    raise TypeError(f"metric.create: expected a name, an EvalMetric or a list, not "
                    f"{type(metric).__name__}")

