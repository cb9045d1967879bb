"""depengine.autograd: mxnet.autograd's names.

    from depengine import np, autograd
    x = np.array([1., 2., 3.]); x.attach_grad()
    with autograd.record():
        y = (x * x).sum()
    y.backward()          # pushed: returns at once
    print(x.grad)         # a blocker: array([2., 4., 6.])

Recording is per thread. The tape and the backward walk are C++ (depengine/autograd.h);
these context managers only set the thread's flags.
"""
from ._depengine import autograd as _ag

backward = _ag.backward
grad = _ag.grad
mark_variables = _ag.mark_variables
is_recording = _ag.is_recording
is_training = _ag.is_training
set_recording = _ag.set_recording
set_training = _ag.set_training


class _RecordingStateScope:
    """Sets the recording and training flags (None: unchanged) and restores them on exit."""

    def __init__(self, is_record, train_mode):
        self._enter_is_record = is_record
        self._enter_train_mode = train_mode
        self._prev_is_record = None
        self._prev_train_mode = None

    def __enter__(self):
        if self._enter_is_record is not None:
            self._prev_is_record = set_recording(self._enter_is_record)
        if self._enter_train_mode is not None:
            self._prev_train_mode = set_training(self._enter_train_mode)
        return self

    def __exit__(self, *exc):
        if self._enter_is_record is not None:
            set_recording(self._prev_is_record)
        if self._enter_train_mode is not None:
            set_training(self._prev_train_mode)
        return False


def record(train_mode=True):
    """Records the ops run inside the scope for backward (and sets training mode)."""
    return _RecordingStateScope(True, train_mode)


def pause(train_mode=False):
    """Stops recording inside the scope."""
    return _RecordingStateScope(False, train_mode)


def train_mode():
    """Training mode inside the scope (dropout active), recording unchanged."""
    return _RecordingStateScope(None, True)


def predict_mode():
    """Prediction mode inside the scope, recording unchanged."""
    return _RecordingStateScope(None, False)


__all__ = ["backward", "grad", "mark_variables", "is_recording", "is_training", "set_recording",
           "set_training", "record", "pause", "train_mode", "predict_mode"]
