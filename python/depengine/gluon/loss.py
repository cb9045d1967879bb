"""gluon.loss, as MXNet 1.9's: each loss returns the per-sample loss (the mean over every
axis but batch_axis), scaled by `weight` and by sample_weight when given.

    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    l = loss(net(X), y)          # shape (batch,)
"""
from .. import np
from . import _ops
from .block import HybridBlock

__all__ = ["Loss", "L2Loss", "L1Loss", "SoftmaxCrossEntropyLoss", "SoftmaxCELoss",
           "SigmoidBinaryCrossEntropyLoss", "SigmoidBCELoss"]


def _reshape_like(label, pred, who):
    if tuple(label.shape) == tuple(pred.shape):
        return label
    if label.size != pred.size:
        raise ValueError(f"{who}: a label of shape {tuple(label.shape)} does not fit a "
                         f"prediction of shape {tuple(pred.shape)}")
    return label.reshape(pred.shape)


class Loss(HybridBlock):
    """The base of losses: weight (a scalar or None) and batch_axis."""

    def __init__(self, weight, batch_axis, **kwargs):
        super().__init__(**kwargs)
        self._weight = weight
        self._batch_axis = batch_axis

    def __repr__(self):
        return f"{type(self).__name__}(batch_axis={self._batch_axis}, w={self._weight})"

    def _weighted_mean(self, loss, weight, sample_weight):
        if sample_weight is not None:
            loss = loss * sample_weight
        if weight is not None:
            loss = loss * float(weight)
        return _ops.mean_except(loss, self._batch_axis)


class L2Loss(Loss):
    """weight/2 · (label - pred)², averaged per sample (weight 1 by default)."""

    def __init__(self, weight=1.0, batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)

    def forward(self, pred, label, sample_weight=None):
        label = _reshape_like(label, pred, self.name)
        loss = np.square(label - pred)
        w = None if self._weight is None else self._weight / 2.0
        return self._weighted_mean(loss, w, sample_weight)


class L1Loss(Loss):
    """|label - pred|, averaged per sample."""

    def __init__(self, weight=None, batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)

    def forward(self, pred, label, sample_weight=None):
        label = _reshape_like(label, pred, self.name)
        return self._weighted_mean(np.abs(label - pred), self._weight, sample_weight)


class SoftmaxCrossEntropyLoss(Loss):
    """-log softmax(pred)[label] along `axis` (sparse_label: class indices), or
    -sum(label · log softmax(pred)) for label distributions (sparse_label=False); with
    from_logits=True, pred already holds log-probabilities."""

    def __init__(self, axis=-1, sparse_label=True, from_logits=False, weight=None,
                 batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        self._axis = axis
        self._sparse_label = sparse_label
        self._from_logits = from_logits

    def forward(self, pred, label, sample_weight=None):
        if self._sparse_label:
            expect = list(pred.shape)
            del expect[self._axis % pred.ndim]
            if label.size != _ops.numel(expect):
                raise ValueError(f"{self.name}: labels of shape {tuple(label.shape)} do not fit "
                                 f"a prediction of shape {tuple(pred.shape)} (one class index "
                                 f"per sample: {tuple(expect)})")
            loss = None
            if self._axis % pred.ndim == pred.ndim - 1:
                loss = _ops.softmax_cross_entropy(pred, label, self._from_logits)
            if loss is not None:
                # The fused op's (batch,) is already the per-sample mean over the kept axis
                # of length 1: the same values without two reshapes (and their tape nodes).
                if self._weight is None and sample_weight is None and self._batch_axis % 2 == 0:
                    return loss
                loss = loss.reshape(-1, 1)
            else:
                logp = pred if self._from_logits else _ops.log_softmax(pred, axis=self._axis)
                loss = -_ops.pick(logp, label, axis=self._axis)
            return self._weighted_mean(loss, self._weight, sample_weight)
        logp = pred if self._from_logits else _ops.log_softmax(pred, axis=self._axis)
        label = _reshape_like(label, pred, self.name)
        loss = -(logp * label).sum(axis=self._axis, keepdims=True)
        return self._weighted_mean(loss, self._weight, sample_weight)


SoftmaxCELoss = SoftmaxCrossEntropyLoss


class SigmoidBinaryCrossEntropyLoss(Loss):
    """Binary cross-entropy of sigmoid(pred) against label in [0, 1]:
    max(pred, 0) - pred·label + log(1 + exp(-|pred|)) (stable for large |pred|); with
    from_sigmoid=True, pred holds probabilities and the loss is
    -(label·log(pred + 1e-12) + (1 - label)·log(1 - pred + 1e-12)). pos_weight scales the
    positive term."""

    def __init__(self, from_sigmoid=False, weight=None, batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        self._from_sigmoid = from_sigmoid

    def forward(self, pred, label, sample_weight=None, pos_weight=None):
        label = _reshape_like(label, pred, self.name)
        if not self._from_sigmoid:
            if pos_weight is None:
                loss = np.maximum(pred, 0.0) - pred * label + _ops.softrelu(-np.abs(pred))
            else:
                log_weight = 1.0 + (pos_weight - 1.0) * label
                loss = pred - pred * label + log_weight * (
                    _ops.softrelu(-np.abs(pred)) + np.maximum(-pred, 0.0))
        else:
            eps = 1e-12
            if pos_weight is None:
                loss = -(np.log(pred + eps) * label + np.log(1.0 - pred + eps) * (1.0 - label))
            else:
                loss = -(np.log(pred + eps) * label * pos_weight
                         + np.log(1.0 - pred + eps) * (1.0 - label))
        return self._weighted_mean(loss, self._weight, sample_weight)


SigmoidBCELoss = SigmoidBinaryCrossEntropyLoss
