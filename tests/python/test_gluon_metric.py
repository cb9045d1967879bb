"""gluon.metric: Accuracy, Loss, MAE, MSE and CompositeEvalMetric against NumPy's answers
(fused path on CPU arrays of the usual shapes, composed path otherwise), updates that push
ops without blocking, the same totals on every engine, and errors that name the problem."""
import math
import threading

import numpy
import pytest

import depengine as de
from depengine import gluon, np, npx
from depengine._depengine import _gluon

R = numpy.random.default_rng(5)
LOGITS = [R.standard_normal((33, 7)).astype(numpy.float32) for _ in range(4)]
LABELS = [R.integers(0, 7, 33).astype(numpy.float32) for _ in range(4)]


def numpy_accuracy():
    right = sum(int((z.argmax(axis=1) == y).sum()) for z, y in zip(LOGITS, LABELS))
    return right / sum(len(y) for y in LABELS)


def test_accuracy_fused_path_matches_numpy():
    acc = gluon.metric.Accuracy()
    for z, y in zip(LOGITS, LABELS):
        acc.update(np.array(y), np.array(z))
    assert acc.num_inst == 4 * 33
    name, value = acc.get()
    assert name == "accuracy"
    assert value == pytest.approx(numpy_accuracy(), abs=0)
    assert acc._pending == []  # every update went through the fused op


def test_accuracy_lists_labels_as_columns_and_class_predictions():
    acc = gluon.metric.Accuracy()
    acc.update([np.array(LABELS[0].reshape(-1, 1))], [np.array(LOGITS[0])])
    # Predictions already reduced to classes: compared as they are (the composed path).
    acc.update(np.array(LABELS[1]), np.array(LOGITS[1].argmax(axis=1).astype(numpy.float32)))
    want = (int((LOGITS[0].argmax(1) == LABELS[0]).sum()) +
            int((LOGITS[1].argmax(1) == LABELS[1]).sum())) / 66
    assert acc.get()[1] == pytest.approx(want, abs=0)


def test_accuracy_other_axis_uses_the_composed_path():
    acc = gluon.metric.Accuracy(axis=0)
    z = LOGITS[0].T.copy()  # (classes, rows)
    acc.update(np.array(LABELS[0]), np.array(z))
    assert acc.get()[1] == pytest.approx(float((z.argmax(0) == LABELS[0]).mean()), abs=0)


def test_arrays_on_a_gpu_are_summed_at_get():
    with de.Engine("threaded", cpu_threads=2, sim_gpus=1):
        acc, loss = gluon.metric.Accuracy(), gluon.metric.Loss()
        for z, y in zip(LOGITS, LABELS):
            zg, yg = np.array(z, ctx=npx.gpu(0)), np.array(y, ctx=npx.gpu(0))
            acc.update(yg, zg)
            loss.update(None, zg)
        assert len(acc._pending) == 4  # no fused op on a GPU: one pending sum per update
        assert acc.get()[1] == pytest.approx(numpy_accuracy(), abs=0)
        want = numpy.concatenate([z.ravel() for z in LOGITS]).astype(numpy.float64)
        assert loss.get()[1] == pytest.approx(want.mean(), rel=1e-5)


def test_loss_is_the_mean_of_every_loss_given():
    m = gluon.metric.Loss()
    losses = [R.random((16,)).astype(numpy.float32) for _ in range(5)]
    for l in losses:
        m.update(None, np.array(l))
    want = numpy.concatenate(losses).astype(numpy.float64)
    assert m.get() == ("loss", pytest.approx(want.sum() / want.size, rel=1e-6))


def test_mae_and_mse_average_per_update_as_mxnet():
    mae, mse = gluon.metric.MAE(), gluon.metric.MSE()
    pairs = [(R.random((4, 3)).astype(numpy.float32), R.random((4, 3)).astype(numpy.float32))
             for _ in range(3)]
    for y, p in pairs:
        mae.update(np.array(y), np.array(p))
        mse.update(np.array(y), np.array(p))
    assert mae.get()[1] == pytest.approx(numpy.mean([abs(y - p).mean() for y, p in pairs]),
                                         rel=1e-5)
    assert mse.get()[1] == pytest.approx(numpy.mean([((y - p) ** 2).mean() for y, p in pairs]),
                                         rel=1e-5)


def test_composite_and_create():
    c = gluon.metric.create(["acc", "loss"])
    assert isinstance(c, gluon.metric.CompositeEvalMetric)
    c.update(np.array(LABELS[0]), np.array(LOGITS[0]))
    names, values = c.get()
    assert names == ["accuracy", "loss"]
    assert values[0] == pytest.approx(float((LOGITS[0].argmax(1) == LABELS[0]).mean()), abs=0)
    assert values[1] == pytest.approx(float(LOGITS[0].astype(numpy.float64).mean()), rel=1e-6)
    with pytest.raises(ValueError, match="unknown metric 'f1'"):
        gluon.metric.create("f1")
    with pytest.raises(TypeError, match="expected a name"):
        gluon.metric.create(3)


def test_get_before_any_update_is_nan_and_reset_forgets():
    acc = gluon.metric.Accuracy()
    assert math.isnan(acc.get()[1])
    acc.update(np.array(LABELS[0]), np.array(LOGITS[0]))
    acc.reset()
    assert acc.num_inst == 0 and math.isnan(acc.get()[1])
    acc.update(np.array(LABELS[1]), np.array(LOGITS[1]))
    assert acc.get()[1] == pytest.approx(float((LOGITS[1].argmax(1) == LABELS[1]).mean()), abs=0)


def test_update_pushes_and_does_not_wait():
    """An update behind a slow op returns before that op has run: it is only pushed."""
    e = de.engine()
    z = np.array(LOGITS[0])
    release, ran = threading.Event(), []

    def hold():
        release.wait(10)
        ran.append(True)

    e.push(hold, reads=[], writes=[z.var])  # z is written until `release`
    acc, loss = gluon.metric.Accuracy(), gluon.metric.Loss()
    acc.update(np.array(LABELS[0]), z)
    loss.update(None, z)
    assert not ran  # had an update waited for z, hold() would have run (after 10 s)
    release.set()
    assert acc.get()[1] == pytest.approx(float((LOGITS[0].argmax(1) == LABELS[0]).mean()), abs=0)
    assert loss.get()[1] == pytest.approx(float(LOGITS[0].astype(numpy.float64).mean()), rel=1e-6)


@pytest.mark.parametrize("kind,threads", [("naive", 1), ("threaded", 1), ("threaded", 4)])
def test_same_totals_on_every_engine(kind, threads):
    with de.Engine(kind, cpu_threads=threads):
        acc, loss = gluon.metric.Accuracy(), gluon.metric.Loss()
        for z, y in zip(LOGITS, LABELS):
            acc.update(np.array(y), np.array(z))
            loss.update(None, np.array(z))
        assert acc.get()[1] == pytest.approx(numpy_accuracy(), abs=0)
        want = numpy.concatenate([z.ravel() for z in LOGITS]).astype(numpy.float64)
        assert loss.get()[1] == pytest.approx(want.mean(), rel=1e-6)


def test_errors_name_the_problem():
    acc = gluon.metric.Accuracy()
    with pytest.raises(ValueError, match="2 labels and 1 predictions"):
        acc.update([np.array(LABELS[0]), np.array(LABELS[1])], [np.array(LOGITS[0])])
    with pytest.raises(ValueError, match="does not fit labels"):
        acc.update(np.array(LABELS[0][:5]), np.array(LOGITS[0]))
    with pytest.raises(TypeError, match="labels is None"):
        acc.update(None, np.array(LOGITS[0]))
    with pytest.raises(ValueError, match="do not fit predictions"):
        gluon.metric.MSE().update(np.zeros((3,)), np.zeros((4,)))
    assert acc.num_inst == 0  # nothing counted by the refused updates
    # The bound ops: a total of the wrong size, labels that do not match.
    with pytest.raises(ValueError, match="add_sum: the total must hold one element"):
        _gluon.add_sum(np.zeros((2,)), np.zeros((3,)))
    with pytest.raises(ValueError, match="add_count_correct: labels of shape"):
        _gluon.add_count_correct(np.zeros((1,)), np.zeros((4, 3)), np.zeros((5,)))


def test_a_total_that_is_also_the_input():
    t = np.ones((1,))
    _gluon.add_sum(t, t)  # reads and writes one var: refused or computed, never corrupted
    assert t.item() == 2.0


def test_an_update_from_another_engine_is_refused_and_not_counted():
    acc = gluon.metric.Accuracy()
    acc.update(np.array(LABELS[0]), np.array(LOGITS[0]))
    with de.Engine("threaded", cpu_threads=2):
        z, y = np.array(LOGITS[1]), np.array(LABELS[1])
        with pytest.raises(ValueError, match="add_count_correct: the arrays live on different "
                                             "engines"):
            acc.update(y, z)
    assert acc.num_inst == 33
    assert acc.get()[1] == pytest.approx(float((LOGITS[0].argmax(1) == LABELS[0]).mean()), abs=0)
