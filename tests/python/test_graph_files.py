"""Graph dumps and graph files from Python (issue 27, item 5): a de.record() dump loads back,
nested recordings keep their ops, and deep nesting is refused at once."""
import resource
import subprocess
import sys

import pytest

import depengine as de
from depengine import np


def recorded_graph(e):
    with de.record(e) as rec:
        v, w = e.new_var(), e.new_var()
        e.push(lambda: None, writes=[v])            # default name "python"
        e.push(lambda: None, reads=[v], writes=[w])  # "python" again
        with e:
            x = np.ones(3)
            y = x + 1
            del x, y                                 # two deferred deletes
    e.wait_all()
    return rec.graph()


@pytest.mark.parametrize("kind", ["naive", "threaded"])
def test_a_record_dump_with_repeated_op_names_loads_back(kind, tmp_path):
    e = de.Engine(kind, cpu_threads=2)
    g = recorded_graph(e)
    names = g.node_names()
    assert names.count("python") == 2 and len(set(names)) < len(names), names
    p = de.parse_program(g.to_json())
    assert p.op_count == g.node_count
    assert p.graph().edge_count == g.edge_count
    assert p.graph().analyze().ops == g.node_count
    path = tmp_path / "dump.json"
    path.write_text(g.to_json())
    assert de.load_program(str(path)).op_count == g.node_count
    # Written back as a graph file (whose op names are unique), it loads again.
    back = de.parse_program(p.to_json())
    assert back.op_count == g.node_count
    assert back.graph().node_names().count("python") == 1
    assert "python#2" in back.graph().node_names()
    p.run(de.Engine("naive"))


def test_a_graph_file_still_refuses_repeated_op_names():
    with pytest.raises(ValueError, match='"a" duplicates the name of op 0'):
        de.parse_program('{"ops": [{"name": "a"}, {"name": "a"}]}')


def test_a_record_nested_in_another_on_the_same_engine_keeps_both():
    e = de.Engine("threaded", cpu_threads=2)
    v = e.new_var()
    with de.record(e) as outer:
        e.push(lambda: None, writes=[v], name="before")
        with de.record(e) as inner:
            e.push(lambda: None, writes=[v], name="inside")
        e.push(lambda: None, writes=[v], name="after")
    e.push(lambda: None, writes=[v], name="outside")
    e.wait_all()
    assert outer.graph().node_names() == ["before", "inside", "after"]
    assert inner.graph().node_names() == ["inside"]
    # Closed out of order, each still keeps its own region.
    a, b = de.record(e), de.record(e)
    a.__enter__()
    b.__enter__()
    e.push(lambda: None, writes=[v], name="both")
    a.__exit__(None, None, None)
    e.push(lambda: None, writes=[v], name="b only")
    b.__exit__(None, None, None)
    e.wait_all()
    assert a.graph().node_names() == ["both"]
    assert b.graph().node_names() == ["both", "b only"]


DEEP = """
import resource, sys
import depengine as de
text = "[" * 10_000_000
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for parse in (de.parse_program, de.Graph.from_json):
    try:
        parse(text)
        print("accepted")
    except ValueError as err:
        print(str(err)[:80])
print("grew_kb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def test_deeply_nested_brackets_are_refused_at_once():
    p = subprocess.run([sys.executable, "-c", DEEP], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "nested deeper than 64 levels" in lines[0], lines
    assert "nested deeper than 64 levels" in lines[1], lines
    grew_kb = int(lines[2].split()[1])
    assert grew_kb < 100_000, grew_kb  # the text itself is 10 MB (twice: str and C++)


def test_a_dump_nested_as_deep_as_dumps_are_is_accepted():
    e = de.Engine("naive")
    g = recorded_graph(e)
    assert de.Graph.from_json(g.to_json()).node_count == g.node_count
