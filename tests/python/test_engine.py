"""depengine.Engine from Python: Python ops, push_async, threads, graphs."""
import json
import os
import signal
import subprocess
import sys
import threading

import pytest

import depengine as de
from depengine import np


@pytest.fixture(params=["naive", "threaded"])
def engine(request):
    return de.Engine(request.param, cpu_threads=2)


def test_python_ops_run_in_dependency_order(engine):
    v = engine.new_var()
    seen = []
    for i in range(50):
        engine.push(lambda i=i: seen.append(i), writes=[v], name=f"w{i}")
    engine.wait_to_read(v)
    assert seen == list(range(50))


def test_reads_run_after_the_write(engine):
    v = engine.new_var()
    box = {}
    engine.push(lambda: box.update(x=41), writes=[v])
    out = []
    for _ in range(8):
        engine.push(lambda: out.append(box["x"] + 1), reads=[v])
    engine.wait_all()
    assert out == [42] * 8


def test_exception_poisons_writes_and_reraises_with_type_and_message(engine):
    v, w = engine.new_var(), engine.new_var()

    class Custom(Exception):
        pass

    def bad():
        raise Custom("original message")
    engine.push(bad, writes=[v])
    ran = []
    engine.push(lambda: ran.append(1), reads=[v], writes=[w])
    with pytest.raises(Custom, match="original message") as info:
        engine.wait_to_read(w)
    assert "bad" in "".join(str(t.name) for t in info.traceback)
    assert ran == []
    with pytest.raises(Custom):
        engine.wait_all()
    engine.wait_all()  # forgotten after the first wait_all
    engine.push(lambda: None, writes=[v])  # a write-only access clears the failure
    engine.wait_to_read(v)


def test_push_async_completed_from_another_python_thread(engine):
    v = engine.new_var()
    result = []

    def start(done):
        def work():
            result.append("done")
            done()
        threading.Thread(target=work).start()
    engine.push_async(start, writes=[v])
    engine.wait_to_read(v)
    assert result == ["done"]

    def fail(done):
        threading.Thread(target=lambda: done(LookupError("from a thread"))).start()
    engine.push_async(fail, writes=[v])
    with pytest.raises(LookupError, match="from a thread"):
        engine.wait_to_read(v)
    with pytest.raises(LookupError):
        engine.wait_all()


def test_dropped_completion_fails_the_op(engine):
    v = engine.new_var()
    engine.push_async(lambda done: None, writes=[v])
    with pytest.raises(de.Error):
        engine.wait_to_read(v)
    with pytest.raises(de.Error):
        engine.wait_all()


def test_push_rejects_bad_arguments(engine):
    v = engine.new_var()
    with pytest.raises(TypeError, match="callable"):
        engine.push(42, writes=[v])
    with pytest.raises(TypeError, match="Var or ndarray"):
        engine.push(lambda: None, reads=["x"])
    engine.delete_var(v)
    with pytest.raises(de.Error, match="deleted"):
        engine.push(lambda: None, writes=[v])
    with pytest.raises(ValueError, match="kind"):
        de.Engine("bogus")


def test_push_takes_none_for_no_vars(engine):
    # None means no vars, as the empty default does (it was refused with nanobind's
    # "incompatible function arguments").
    ran = []
    engine.push(lambda: ran.append(1), reads=None, writes=None)
    engine.push_async(lambda done: (ran.append(2), done()), None, None)
    engine.wait_all()
    assert sorted(ran) == [1, 2]


def test_arrays_dropped_while_their_ops_are_pending():
    e = de.Engine("threaded", cpu_threads=2)
    gate = threading.Event()
    with e:
        x = np.ones((64, 64))
        e.push(gate.wait, reads=[x])
        y = np.dot(x, x)
        del x  # only queues its delete_var
        z = y + 1
        del y
    gate.set()
    assert z.sum().item() == 64 * 64 * 65


def test_four_python_threads_pushing_at_once():
    e = de.Engine("threaded", cpu_threads=2)
    counters = [e.new_var() for _ in range(4)]
    totals = [[0] for _ in range(4)]
    arrays = [None] * 4

    def worker(k):
        with e:
            a = np.zeros(8)
            for i in range(200):
                e.push(lambda k=k: totals[k].__setitem__(0, totals[k][0] + 1), writes=[counters[k]])
                a = a + 1
            arrays[k] = a
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    e.wait_all()
    assert [t[0] for t in totals] == [200] * 4
    assert all(a.asnumpy().tolist() == [200.0] * 8 for a in arrays)


def test_record_analyze_and_dump():
    e = de.Engine("threaded", cpu_threads=2)
    a, b, c = e.new_var(), e.new_var(), e.new_var()
    with de.record(e, profile=True) as rec:
        e.push(lambda: None, writes=[a], name="A")
        e.push(lambda: None, writes=[b], name="B")
        e.push(lambda: None, reads=[a, b], writes=[c], name="C")
        rec.set_var_name(c, "cvar")
    e.wait_all()
    g = rec.graph()
    assert g.node_names() == ["A", "B", "C"]
    assert sorted(k for _, _, k in g.edges()) == ["RAW", "RAW"]
    an = g.analyze(unit_costs=True)
    assert (an.ops, an.edges, an.work, an.span) == (3, 2, 3, 2)
    assert an.parallelism == pytest.approx(1.5)
    assert an.critical_path_names[-1] == "C" and an.level_width == [2, 1]
    assert "digraph" in g.to_dot() and "cvar" in g.to_dot()
    dump = json.loads(g.to_json())
    assert dump["format"] == "depengine-graph" and len(dump["nodes"]) == 3
    back = de.Graph.from_json(g.to_json())
    assert back.node_count == 3 and back.edge_count == 2
    trace = json.loads(rec.chrome_trace())
    assert any(ev.get("name") == "C" for ev in trace["traceEvents"])
    assert "C" in rec.summary()


def test_graph_file_loads_and_runs(tmp_path):
    f = tmp_path / "g.json"
    f.write_text(json.dumps({"ops": [
        {"name": "a", "reads": [], "writes": ["x"], "cost_us": 10},
        {"name": "b", "reads": ["x"], "writes": ["y"], "cost_us": 10},
        {"name": "c", "reads": ["x"], "writes": ["z"], "cost_us": 10}]}))
    p = de.load_program(str(f))
    assert p.op_count == 3
    assert p.graph().analyze().parallelism == pytest.approx(1.5)
    assert p.run(de.Engine("naive")) > 0
    with pytest.raises(ValueError, match="reads"):
        de.parse_program('{"ops": [{"name": "a", "reads": 3, "writes": []}]}')
    with pytest.raises(ValueError):
        de.load_program(str(tmp_path / "missing.json"))


def run_python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_interpreter_exit_with_pending_work_does_not_hang_or_crash():
    r = run_python(
        "import depengine as de, threading\n"
        "from depengine import np\n"
        "e = de.Engine('threaded', cpu_threads=2)\n"
        "v = e.new_var()\n"
        "gate = threading.Event()\n"
        "e.push(gate.wait, writes=[v])\n"
        "for i in range(100): e.push(lambda i=i: None, writes=[v])\n"
        "x = np.random.normal(size=(300, 300))\n"
        "for _ in range(20): x = np.dot(x, x) / 300\n"
        "threading.Timer(0, gate.set).start()\n"
        "print('leaving')\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "leaving"


def test_failure_nobody_waited_for_is_reported_at_exit():
    # It was dropped without a word by the exit hook's wait.
    r = run_python(
        "import depengine as de\n"
        "e = de.Engine('threaded', cpu_threads=2)\n"
        "v = e.new_var()\n"
        "e.push(lambda: 1 / 0, writes=[v])\n")
    assert r.returncode == 0, r.stderr
    assert "depengine: an operation failed and no wait reported it" in r.stderr, r.stderr
    assert "ZeroDivisionError" in r.stderr, r.stderr


def test_python_op_pushed_by_a_daemon_thread_during_exit_is_safe():
    r = run_python(
        "import depengine as de, threading\n"
        "e = de.Engine('threaded', cpu_threads=2)\n"
        "v = e.new_var()\n"
        "def spam():\n"
        "    while True:\n"
        "        try: e.push(lambda: None, writes=[v])\n"
        "        except Exception: pass\n"
        "threading.Thread(target=spam, daemon=True).start()\n"
        "e.push(lambda: None, writes=[v])\n")
    assert r.returncode == 0, r.stderr


def test_exit_is_not_held_by_a_daemon_thread_that_keeps_pushing_arrays():
    # The exit hook waited for every engine while the daemon kept pushing: the process never
    # ended and its memory grew by ~1 GB/s. Pushes made once exit began now raise
    # depengine.Error, and the daemon dies with the interpreter, as in plain Python.
    r = run_python(
        "import threading, time\n"
        "from depengine import np\n"
        "def daemon():\n"
        "    a = np.ones((200, 200))\n"
        "    while True:\n"
        "        b = np.dot(a, a)\n"
        "threading.Thread(target=daemon, daemon=True).start()\n"
        "time.sleep(0.05)\n"
        "print('main end', flush=True)\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "main end"


def run_python_process_group(code, timeout=60):
    # As run_python, but on a timeout kills the processes the program forked too: a child
    # left running keeps the output pipes open, and the test would wait for it forever.
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"still running after {timeout} s; output: {out!r} {err!r}")
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_fork_child_gets_an_error_not_a_hang():
    # A child of os.fork() has none of the engine's threads: its waits never ended, and it
    # hung at exit in the engine's shutdown, with its parent waiting for it. The parent's
    # engine now refuses in the child with an error naming fork(), and the child exits.
    r = run_python_process_group(
        "import os, sys\n"
        "import depengine as de\n"
        "from depengine import np, npx\n"
        "x = np.ones((300, 300))\n"
        "for _ in range(20): x = np.tanh(np.dot(x, x) * 0.001)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    try:\n"
        "        y = np.ones((10,)) * 3\n"
        "        npx.waitall()\n"
        "        print('child: no error', flush=True)\n"
        "    except Exception as e:\n"
        "        print('child: fork() named' if 'fork()' in str(e) else 'child: ' + str(e), flush=True)\n"
        "    sys.exit(0)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print('parent:', float(x.sum()) >= 0, os.waitstatus_to_exitcode(status), flush=True)\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["child: fork() named", "parent: True 0"], r.stdout


def test_push_under_back_pressure_releases_the_gil():
    # Python ops need the GIL to finish; a push blocked by max_inflight must not hold it.
    e = de.Engine("threaded", cpu_threads=2, max_inflight=2)
    v = e.new_var()
    out = []
    for i in range(200):
        e.push(lambda i=i: out.append(i), writes=[v])
    e.wait_all()
    assert out == list(range(200))


def test_ops_push_ops_and_cannot_wait(engine):
    v, w = engine.new_var(), engine.new_var()
    seen = []

    def outer():
        engine.push(lambda: seen.append("inner"), reads=[v], writes=[w])
        seen.append("outer")
    engine.push(outer, writes=[v])
    engine.wait_all()
    assert sorted(seen) == ["inner", "outer"]

    def waits():
        engine.wait_to_read(w)
    engine.push(waits, writes=[v])
    with pytest.raises(de.Error, match="inside"):
        engine.wait_all()


@pytest.mark.parametrize("env", [{"DEPENGINE_TYPE": "naive"},
                                 {"DEPENGINE_TYPE": "threaded", "DEPENGINE_MAX_INFLIGHT": "4"}],
                         ids=["naive", "threaded-bounded"])
def test_inplace_arithmetic_where_a_push_may_block(env):
    """x += y (and -=, *=, /=, with arrays, scalars and lists) on an engine whose pushes may
    block, where the binding releases the GIL around the push: the operand is read before,
    with the GIL held. It used to be read inside, without the GIL, and the first such op of
    a process crashed it (segmentation fault: examples/python/mlp_gluon.py on the naive
    engine). A fresh process, so that nothing read an operand with the GIL before."""
    code = ("from depengine import np\n"
            "x = np.zeros((2,)); x += np.ones((2,)); x += 1.5; x -= [0.5, 0.5]\n"
            "x *= 2; x /= 4; print(x.asnumpy().tolist())\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, **env))
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "[1.0, 1.0]"
