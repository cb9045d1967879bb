"""The Python examples run (against the installed package)."""
import os
import pathlib
import subprocess
import sys

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


def run(args, cwd, env=None):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=None if env is None else {**os.environ, **env})


def test_d2l_chapter_example_runs():
    # 13.2.4's training loops on 4 batches: the figures and their text, not their values.
    r = run(["d2l_async.py"], EXAMPLES, env={"D2L_MEMORY_BATCHES": "4"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("increased memory:") == 2 and r.stdout.count("time per epoch:") == 2
    for figure in ["13.2.4: 4 batches", "with l.wait_to_read() per batch",
                   "without (waitall at the end)", "What 13.2.4's figures say."]:
        assert figure in r.stdout
    # Its text follows its figures.
    import re
    rows = {m.group(1): (float(m.group(2)), float(m.group(4)))
            for m in re.finditer(r"^(with l\.wait_to_read\(\) per batch|without \(waitall at the "
                                 r"end\))\s+([0-9.]+)s\s+(-?[0-9.]+) MB\s+(-?[0-9.]+) MB$",
                                 r.stdout, re.M)}
    assert len(rows) == 2, r.stdout
    (t_b, peak_b), (t_n, peak_n) = rows["with l.wait_to_read() per batch"], rows[
        "without (waitall at the end)"]
    text = " ".join(r.stdout.split("What 13.2.4's figures say.")[1].split())
    # (printed figures are rounded: a case at a threshold may go either way)
    bound = 2 * max(peak_b, 1.0) + 10
    if abs(peak_n - bound) > 0.5:
        assert ("every batch pushed ahead held" in text) == (peak_n > bound)
    t_ratio = t_n / t_b
    if abs(t_ratio - 0.9) > 0.01:
        assert ("overlapped the workers' arithmetic" in text) == (t_ratio < 0.9)
    for figure in ["numpy:", "mxnet.np:", "Done:", "waitall:", "wait_to_read:",
                   "numpy conversion:", "scalar conversion:", "synchronous:", "asynchronous:",
                   "array([[3., 3.]])", "synchronous / asynchronous"]:
        assert figure in r.stdout
    # The closing text follows the figures: it said "several times slower" even in runs where
    # the synchronous loop was not (0.9x under load).
    import re
    ratio = float(re.search(r"synchronous / asynchronous\s+([0-9.]+)x", r.stdout).group(1))
    text = " ".join(r.stdout.split("What these say.")[1].split())
    if ratio >= 1.1:
        assert f"it is {ratio:.1f}x slower than the asynchronous one" in text
    else:
        assert f"in this run it took {ratio:.1f}x" in text and "did not show" in text


def test_chapter_code_differs_only_in_the_import():
    src = (EXAMPLES / "d2l_async.py").read_text()
    assert "from depengine import autograd, gluon, np, npx\n" in src
    imports = [line for line in src.splitlines() if line.startswith(("import ", "from "))]
    assert imports == ["import os", "import subprocess", "import numpy",
                       "from depengine import autograd, gluon, np, npx",
                       "from depengine.gluon import nn", "from d2l import mxnet as d2l"]


def test_graph_example_runs(tmp_path):
    r = run([str(EXAMPLES / "graph.py"), "--tiles", "4", "--tile-size", "32", "--repeats", "1",
             "--out", str(tmp_path)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "20 ops" in r.stdout and "speedup" in r.stdout
    assert (tmp_path / "cholesky.dot").read_text().startswith("digraph")
