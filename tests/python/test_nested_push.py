# Ops pushed by running ops (issue 27, item 3): they belong to their pusher's wait_all epoch,
# so a wait_all that waits for an op waits for what it pushes, and at interpreter exit such
# pushes go through instead of failing as if a daemon thread had made them.
import subprocess
import sys
import time

import depengine as de


def test_wait_all_waits_for_ops_pushed_by_a_running_op():
    e = de.Engine('threaded', cpu_threads=2)
    v, w = e.new_var(), e.new_var()
    done = []

    def inner():
        time.sleep(0.02)
        done.append(1)

    def outer():
        time.sleep(0.05)
        e.push(lambda: e.push(inner, writes=[w]), writes=[w])
        e.push(inner, writes=[w])

    e.push(outer, writes=[v])
    e.wait_all()
    assert len(done) == 2


def test_ops_pushed_by_ops_during_interpreter_exit_run():
    r = subprocess.run([sys.executable, "-c",
                        "import depengine as de, time\n"
                        "e = de.Engine('threaded', cpu_threads=2)\n"
                        "v, w = e.new_var(), e.new_var()\n"
                        "def outer():\n"
                        "    time.sleep(0.1)\n"
                        "    e.push(lambda: print('inner ran', flush=True), writes=[w])\n"
                        "e.push(outer, writes=[v])\n"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "daemon thread" not in r.stderr, r.stderr
    assert r.stdout.strip() == "inner ran", (r.stdout, r.stderr)
