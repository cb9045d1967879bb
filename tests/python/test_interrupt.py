"""Ctrl-C (SIGINT) during every blocking call, and an exit that work which can never finish
would hang (issue 27, item 1). Each case runs in a child process under a timeout: the
child sends itself SIGINT and prints how long the call took to raise."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

# The child's preamble: `interrupt_in(s)` sends SIGINT to the process after s seconds;
# `timed(f)` runs f, expecting KeyboardInterrupt, and prints the seconds it took to raise.
PRELUDE = """
import os, signal, sys, threading, time
import depengine as de
from depengine import np, npx

def interrupt_in(s):
    threading.Timer(s, lambda: os.kill(os.getpid(), signal.SIGINT)).start()

def timed(what, f, after=0.3):
    interrupt_in(after)
    t = time.monotonic()
    try:
        f()
    except KeyboardInterrupt:
        print(what, "interrupted", round(time.monotonic() - t - after, 3), flush=True)
        return
    print(what, "returned", round(time.monotonic() - t, 3), flush=True)
"""


def run_child(code, timeout=60, env=None):
    full = dict(os.environ, **(env or {}))
    p = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=timeout, env=full)
    return p


def interrupt_delays(out):
    """{what: seconds from the signal to KeyboardInterrupt} for every `timed` line."""
    delays = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in ("interrupted", "returned"):
            assert parts[1] == "interrupted", line
            delays[parts[0]] = float(parts[2])
    return delays


def test_waits_on_an_op_that_never_completes_raise_keyboard_interrupt_at_once():
    p = run_child("""
        e = de.Engine("threaded", cpu_threads=2)
        v = e.new_var()
        held = []
        e.push_async(lambda done: held.append(done), writes=[v], name="held")
        timed("wait_to_read", lambda: e.wait_to_read(v))
        timed("wait_all", e.wait_all)
        x = np.ones(3)          # the default engine: the array blockers
        one = np.ones(())
        de.engine().push_async(lambda done: held.append(done), writes=[x, one], name="held2")
        timed("asnumpy", x.asnumpy)
        timed("item", one.item)
        timed("print", lambda: print(x))
        timed("float", lambda: float(one))
        timed("ndarray.wait_to_read", x.wait_to_read)
        timed("waitall", npx.waitall)
        print("pending", e.pending, de.engine().pending, flush=True)
        for d in held:
            d()
        e.wait_all()
        npx.waitall()
        print("after", x.asnumpy().tolist(), one.item(), e.pending, flush=True)
    """)
    assert p.returncode == 0, p.stderr
    delays = interrupt_delays(p.stdout)
    assert set(delays) == {"wait_to_read", "wait_all", "asnumpy", "item", "print", "float",
                           "ndarray.wait_to_read", "waitall"}, p.stdout
    for what, d in delays.items():
        assert d < 0.5, (what, d, p.stdout)
    # The held ops (and asnumpy's copy, behind one) were still pending after each
    # interrupt and finished when done() came.
    assert "pending 1 " in p.stdout and "pending 1 0" not in p.stdout, p.stdout
    assert "after [1.0, 1.0, 1.0] 1.0 0" in p.stdout, p.stdout
    assert "no wait reported" not in p.stderr, p.stderr


def test_a_metric_get_behind_an_op_that_never_completes_raises_keyboard_interrupt():
    """gluon.metric's get() is a blocker (it reads the running total): Ctrl-C ends it, and
    the update it waited for still lands once the held op completes."""
    p = run_child("""
        import numpy
        from depengine import gluon
        z = np.array(numpy.array([[0.0, 1.0], [2.0, 1.0]], dtype=numpy.float32))
        y = np.array(numpy.array([1.0, 0.0], dtype=numpy.float32))
        held = []
        de.engine().push_async(lambda done: held.append(done), writes=[z], name="held")
        acc = gluon.metric.Accuracy()
        acc.update(y, z)            # pushed behind the held write of z; returns at once
        timed("metric.get", acc.get)
        for d in held:
            d()
        print("after", acc.get(), flush=True)
    """)
    assert p.returncode == 0, p.stderr
    delays = interrupt_delays(p.stdout)
    assert set(delays) == {"metric.get"}, p.stdout
    assert delays["metric.get"] < 0.5, p.stdout
    assert "after ('accuracy', 1.0)" in p.stdout, p.stdout


def test_a_long_wait_all_is_interrupted_and_the_ops_still_run():
    p = run_child("""
        e = de.Engine("threaded", cpu_threads=2)
        v = e.new_var()
        ran = []
        for i in range(40):   # 2 s, one after another (each writes v)
            e.push(lambda i=i: (time.sleep(0.05), ran.append(i)), writes=[v])
        timed("wait_all", e.wait_all)
        print("ran at interrupt", len(ran) < 40, flush=True)
        e.wait_all()
        print("ran", ran == list(range(40)), e.pending, flush=True)
    """)
    assert p.returncode == 0, p.stderr
    assert interrupt_delays(p.stdout)["wait_all"] < 0.5, p.stdout
    assert "ran at interrupt True" in p.stdout and "ran True 0" in p.stdout, p.stdout


def test_a_failure_seen_by_an_interrupted_wait_all_is_raised_by_the_next():
    # The interrupted wait_all goes on on a helper thread and receives the failure (the
    # engine hands it to one wait_all only); the next wait_all must raise it.
    p = run_child("""
        e = de.Engine("threaded", cpu_threads=2)
        v = e.new_var()
        def boom():
            raise ValueError("boom")
        e.push(lambda: time.sleep(0.6), writes=[v])
        e.push(boom, writes=[v], name="boom")
        timed("wait_all", e.wait_all, after=0.2)
        time.sleep(1.0)  # the abandoned wait has ended by now
        try:
            e.wait_all()
            print("lost", flush=True)
        except ValueError as err:
            print("raised", err, flush=True)
        e.wait_all()
        print("then clean", flush=True)
    """)
    assert p.returncode == 0, p.stderr
    assert interrupt_delays(p.stdout)["wait_all"] < 0.5, p.stdout
    assert "raised boom" in p.stdout and "then clean" in p.stdout, p.stdout
    assert "no wait reported" not in p.stderr, p.stderr


def test_a_back_pressured_push_is_interrupted():
    p = run_child("""
        e = de.Engine("threaded", cpu_threads=2, max_inflight=2)
        a, b, c = e.new_var(), e.new_var(), e.new_var()
        e.push(lambda: time.sleep(2), writes=[a])
        e.push(lambda: time.sleep(2), writes=[b])
        time.sleep(0.1)  # both running: the bound is reached
        timed("push", lambda: e.push(lambda: None, writes=[c]))
        with e:
            timed("np_push", lambda: np.ones(3))
        e.wait_all()
        print("pending", e.pending, flush=True)
    """)
    assert p.returncode == 0, p.stderr
    delays = interrupt_delays(p.stdout)
    assert delays["push"] < 0.5 and delays["np_push"] < 0.5, p.stdout
    assert "pending 0" in p.stdout, p.stdout


def test_back_pressure_lets_a_push_through_when_the_ops_wait_for_python_done():
    # As the engine does: the pushing thread may be the one to call done() later.
    p = run_child("""
        e = de.Engine("threaded", cpu_threads=2, max_inflight=2)
        held = []
        for i in range(4):
            e.push_async(lambda done: held.append(done), writes=[e.new_var()])
        while len(held) < 4:
            time.sleep(0.01)
        for d in held:
            d()
        e.wait_all()
        print("ok", flush=True)
    """, timeout=30)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr


def test_exit_with_a_done_never_called_says_what_is_left_and_leaves():
    p = run_child("""
        e = de.Engine("threaded", cpu_threads=2)
        held = []
        e.push_async(lambda done: held.append(done), writes=[e.new_var()], name="forgotten")
        de.engine().push_async(lambda done: held.append(done), writes=[de.engine().new_var()],
                               name="lost")
        print("end of script", flush=True)
    """, timeout=60, env={"DEPENGINE_EXIT_TIMEOUT": "1"})
    assert p.returncode == 0, p.stderr
    assert "end of script" in p.stdout
    assert "done() that was never called ('forgotten')" in p.stderr, p.stderr
    assert "done() that was never called ('lost')" in p.stderr, p.stderr
    assert "no wait reported" not in p.stderr, p.stderr


def test_ctrl_c_during_the_exit_wait_leaves_at_once():
    # An op that never ends: the exit waits (and says so) until Ctrl-C, then leaves.
    code = PRELUDE + textwrap.dedent("""
        e = de.Engine("threaded", cpu_threads=2)
        e.push(lambda: time.sleep(3600), writes=[e.new_var()], name="forever")
        print("end of script", flush=True)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, DEPENGINE_EXIT_TIMEOUT="1"))
    try:
        assert p.stdout.readline().strip() == "end of script"
        time.sleep(2.5)  # past the exit timeout: the message is out
        p.send_signal(signal.SIGINT)
        t = time.monotonic()
        out, err = p.communicate(timeout=30)
        took = time.monotonic() - t
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err
    assert took < 2.0, took
    assert "made no progress for 1 s; still waiting" in err, err
    assert "interrupted at exit with 1 operation(s) pending" in err, err


def test_waits_off_the_main_thread_and_inside_ops_behave_as_before():
    p = run_child("""
        e = de.Engine("threaded", cpu_threads=2)
        v = e.new_var()
        e.push(lambda: time.sleep(0.1), writes=[v])
        out = []
        t = threading.Thread(target=lambda: (e.wait_to_read(v), out.append("thread")))
        t.start(); t.join()
        def inner():
            try:
                e.wait_all()
            except de.Error as err:
                out.append("refused")
        e.push(inner)
        e.wait_all()
        print(out, flush=True)
    """)
    assert p.returncode == 0, p.stderr
    assert "['thread', 'refused']" in p.stdout, p.stdout
