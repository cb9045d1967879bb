"""Engine.record / Engine.replay and npx.record / npx.replay from Python."""
import numpy as onp
import pytest

import depengine as de
from depengine import np, npx


@pytest.fixture(params=["naive", "threaded"])
def engine(request):
    return de.Engine(request.param, cpu_threads=2)


def test_replay_runs_the_recorded_python_ops_again_in_order(engine):
    v = engine.new_var()
    seen = []
    seg = engine.record(lambda: [engine.push(lambda i=i: seen.append(i), writes=[v], name=f"w{i}")
                                 for i in range(3)])
    assert isinstance(seg, de.Segment)
    assert len(seg) == 3
    assert seg.names == ["w0", "w1", "w2"]
    for _ in range(4):
        engine.replay(seg)
        engine.push(lambda: seen.append("x"), writes=[v])  # interleaved with the replays
    engine.wait_all()
    assert seen == [0, 1, 2] + ([0, 1, 2, "x"] * 4)


def test_replayed_failure_is_raised_at_the_wait_with_its_type(engine):
    v = engine.new_var()
    calls = []

    def step():
        calls.append(1)
        if len(calls) > 1:
            raise KeyError("second run")

    seg = engine.record(lambda: engine.push(step, writes=[v]))
    engine.wait_to_read(v)
    engine.replay(seg)
    with pytest.raises(KeyError, match="second run"):
        engine.wait_to_read(v)
    with pytest.raises(KeyError):
        engine.wait_all()


def test_record_refuses_waits_inside(engine):
    v = engine.new_var()
    with pytest.raises(de.Error, match="wait_all"):
        engine.record(lambda: engine.wait_all())
    with pytest.raises(de.Error, match="wait_to_read"):
        engine.record(lambda: engine.wait_to_read(v))
    with pytest.raises(de.Error, match="delete_var"):
        engine.record(lambda: engine.delete_var(v))
    with pytest.raises(de.Error, match="another engine"):
        de.Engine("naive").replay(engine.record(lambda: None))
    with pytest.raises(ZeroDivisionError):
        engine.record(lambda: 1 / 0)


def test_npx_record_replays_with_new_inputs(engine):
    with engine:
        w = np.ones((3, 2))
        x = np.zeros((4, 3))
        out = {}

        def step():
            out["y"] = np.dot(x, w) * 2

        seg = npx.record(step, inputs=[x])
        assert len(seg) == 2
        for k in range(1, 4):
            batch = onp.full((4, 3), float(k), dtype=onp.float32)
            npx.replay(seg, [np.array(batch)])
            assert out["y"].asnumpy().tolist() == (batch @ onp.ones((3, 2)) * 2).tolist()
        with pytest.raises(de.Error, match=r"input 0 has shape \(3, 4\)"):
            npx.replay(seg, [np.zeros((3, 4))])
        with pytest.raises(de.Error, match="wait_to_read"):
            npx.record(lambda: x.asnumpy())
