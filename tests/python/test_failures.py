"""Failures re-raised at the boundary (issue 27, item 4): a traceback that does not grow, no
second report at exit, and fork() children that report only what is theirs."""
import subprocess
import sys
import textwrap
import time

import pytest

import depengine as de


def run_python(code, timeout=60):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)


def frames(tb):
    n = 0
    while tb is not None:
        n += 1
        tb = tb.tb_next
    return n


def test_waiting_many_times_on_one_failure_does_not_grow_its_traceback():
    e = de.Engine("threaded", cpu_threads=2)
    v = e.new_var()

    def fail():
        raise KeyError("lost")

    e.push(fail, writes=[v], name="fail")
    seen = []
    for _ in range(1000):
        with pytest.raises(KeyError) as info:
            e.wait_to_read(v)
        seen.append(info.value)
    assert all(x is seen[0] for x in seen)  # the same object, as before
    # The op's frame plus the frame of the wait that raised it, every time.
    assert frames(seen[-1].__traceback__) == frames(seen[0].__traceback__) <= 3
    with pytest.raises(KeyError):
        e.wait_all()


def test_the_cause_and_the_op_frame_are_kept():
    e = de.Engine("threaded", cpu_threads=2)
    v = e.new_var()

    def fail():
        try:
            {}["k"]
        except KeyError as k:
            raise ValueError("outer") from k

    e.push(fail, writes=[v])
    for _ in range(3):
        with pytest.raises(ValueError, match="outer") as info:
            e.wait_to_read(v)
        assert isinstance(info.value.__cause__, KeyError)
        names = []
        tb = info.value.__traceback__
        while tb is not None:
            names.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        assert "fail" in names and len(names) <= 3, names
    with pytest.raises(ValueError):
        e.wait_all()


def test_a_failure_a_wait_raised_is_not_reported_again_at_exit():
    p = run_python("""
        import depengine as de
        from depengine import np
        e = de.Engine("threaded", cpu_threads=2)
        v = e.new_var()
        def fail():
            raise RuntimeError("seen")
        e.push(fail, writes=[v])
        try:
            e.wait_to_read(v)
        except RuntimeError:
            print("raised", flush=True)
        x = np.ones(3)
        de.engine().push(fail, writes=[x])
        try:
            x.asnumpy()
        except RuntimeError:
            print("raised", flush=True)
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("raised") == 2
    assert p.stderr == "", p.stderr


def test_a_failure_no_wait_raised_is_still_reported_at_exit():
    p = run_python("""
        import depengine as de
        e = de.Engine("threaded", cpu_threads=2)
        def fail():
            raise RuntimeError("never waited for")
        e.push(fail, writes=[e.new_var()])
    """)
    assert p.returncode == 0, p.stderr
    assert "no wait reported it: RuntimeError: never waited for" in p.stderr, p.stderr


def test_a_forked_child_prints_nothing_when_nothing_failed_and_raises_depengine_errors():
    p = run_python("""
        import os, sys
        import depengine as de
        from depengine import np, npx
        e = de.Engine("threaded", cpu_threads=2)
        x = np.ones((2, 3))
        y = (x + 1).sum()
        print(y.item(), flush=True)
        pid = os.fork()
        if pid == 0:
            kinds = []
            for call in (lambda: np.ones(3), lambda: x + 1, lambda: x + np.ones((3, 2)),
                         lambda: x.asnumpy(), lambda: x.reshape(6), lambda: print(x),
                         lambda: npx.waitall(), lambda: e.push(lambda: None),
                         lambda: e.wait_all(), lambda: de.Engine("threaded"),
                         lambda: x.sum(axis=0), lambda: np.dot(x, x.T)):
                try:
                    call()
                    kinds.append("ok")
                except Exception as err:
                    kinds.append(type(err).__name__)
            print("child", kinds, flush=True)
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        print("child status", status, flush=True)
        npx.waitall()
    """)
    assert p.returncode == 0, p.stderr
    assert "child status 0" in p.stdout, p.stdout
    line = next(l for l in p.stdout.splitlines() if l.startswith("child ["))
    kinds = eval(line[len("child "):])
    # x.reshape is a view: no engine call, so it works in the child too.
    assert kinds == ["Error"] * 4 + ["ok"] + ["Error"] * 7, kinds
    assert p.stderr == "", p.stderr


def test_done_called_twice_is_an_error_naming_the_op():
    e = de.Engine("threaded", cpu_threads=2)
    v = e.new_var()
    held = []
    e.push_async(lambda done: held.append(done), writes=[v], name="twice")
    while not held:
        time.sleep(0.001)
    held[0]()
    e.wait_to_read(v)
    with pytest.raises(de.Error, match="done: already called for op 'twice'"):
        held[0]()


def test_a_done_dropped_uncalled_fails_its_op():
    e = de.Engine("threaded", cpu_threads=2)
    v = e.new_var()
    e.push_async(lambda done: None, writes=[v], name="dropped")
    with pytest.raises(de.Error, match="without"):
        e.wait_to_read(v)
    with pytest.raises(de.Error):
        e.wait_all()
