"""Memory after a burst (issue 27, item 2): storage no array uses goes back to the system,
except what the pool keeps, at most its cap (DEPENGINE_POOL_CAP_MB, default 64 MiB)."""
import os
import subprocess
import sys
import textwrap

import pytest

import depengine as de
from depengine import np, npx

# The child measures its resident memory (/proc/self/statm) before a burst of 1000x1000
# results that all live at once (the loop runs ahead of the engine), at its peak, and
# after waitall() and dropping them.
BURST = """
import os
import depengine as de
import depengine as de
from depengine import np, npx
page = os.sysconf("SC_PAGESIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
x = np.ones((1000, 1000))
npx.waitall()
before = rss()
ys = [x + 1 for _ in range(60)]   # 240 MB alive at once
npx.waitall()
peak = rss()
del ys
npx.waitall()
after = rss()
s = npx.memory_stats()
print(before, peak, after, s["cached"], s["pool_cap"], flush=True)
"""

MiB = 1 << 20


def burst(env=None):
    p = subprocess.run([sys.executable, "-c", BURST], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, **(env or {})))
    assert p.returncode == 0, p.stderr
    return [int(v) for v in p.stdout.split()]


def test_after_a_burst_at_most_the_pool_cap_stays_resident():
    before, peak, after, cached, cap = burst()
    assert cap == 64 * MiB
    assert peak - before > 200 * MiB
    assert cached <= cap
    assert after - before <= cap + 16 * MiB, (before, peak, after, cached)


def test_the_cap_comes_from_the_environment():
    before, peak, after, cached, cap = burst({"DEPENGINE_POOL_CAP_MB": "0"})
    assert cap == 0 and cached == 0
    assert after - before <= 16 * MiB, (before, peak, after)


def test_a_bad_cap_in_the_environment_is_an_error_naming_it():
    p = subprocess.run([sys.executable, "-c", "from depengine import np; np.ones((1000, 1000))"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, DEPENGINE_POOL_CAP_MB="lots"))
    assert p.returncode != 0
    assert "DEPENGINE_POOL_CAP_MB='lots'" in p.stderr, p.stderr


def test_set_pool_cap_gives_back_what_the_pool_holds_beyond_it():
    cap = npx.pool_cap()
    try:
        npx.set_pool_cap(256 * MiB)
        ys = [np.ones((1000, 1000)) for _ in range(8)]
        npx.waitall()
        del ys
        npx.waitall()
        assert npx.memory_stats()["cached"] >= 8 * 4 * 1000 * 1000
        npx.set_pool_cap(4 * MiB)
        assert npx.memory_stats()["cached"] <= 4 * MiB
        assert npx.pool_cap() == 4 * MiB
        with pytest.raises(ValueError, match="set_pool_cap: bytes must be in"):
            npx.set_pool_cap(-1)
        with pytest.raises(TypeError, match="set_pool_cap: bytes must be an int"):
            npx.set_pool_cap("64")
    finally:
        npx.set_pool_cap(cap)


def test_max_inflight_bounds_a_loop_that_runs_ahead():
    # docs/python.md, "Memory": without a bound all 100 results may exist at once.
    e = de.Engine("threaded", cpu_threads=2, max_inflight=8)
    with e:
        x = np.ones((1000, 1000))
        npx.waitall()
        base = npx.memory_stats()["in_use"]
        npx.reset_memory_peak()
        for _ in range(100):
            y = x + 1
        npx.waitall()
        del y
    peak = npx.memory_stats()["peak"] - base
    assert peak <= 10 * 4_000_000, peak
