"""Messages and interop at the boundary (issue 27, item 6): bad arguments named in the
message (not nanobind's "incompatible function arguments"), NumPy 2's rules for bool() and
copy=False, pickle and copy, and type stubs for the compiled module."""
import ast
import copy
import pathlib
import pickle

import numpy
import pytest

import depengine as de
from depengine import _depengine, np, npx


@pytest.mark.parametrize("call, message", [
    (lambda: np.array(None), "array: object must be a number, a (nested) list of numbers or an "
                             "array, got NoneType"),
    (lambda: de.engine().push(None), "push: fn must be callable, not NoneType"),
    (lambda: de.engine().push_async(None), "push_async: fn must be callable, not NoneType"),
    (lambda: de.engine().record(None), "record: fn must be callable, not NoneType"),
    (lambda: de.parse_program(None), "parse_program: text must be a str"),
    (lambda: de.load_program(None), "load_program: path must be a str or an os.PathLike"),
    (lambda: np.ones("a"), "ones: shape must be an int or a tuple of ints, got str"),
    (lambda: de.Engine(None), "Engine: kind must be 'threaded' or 'naive', got NoneType"),
    (lambda: np.arange("a"), "arange: start must be a number, got str"),
    (lambda: np.arange(0, None, "x"), "arange: step must be a number, got str"),
    (lambda: np.random.normal(loc="a"), "normal: loc must be a number, got str"),
    (lambda: np.random.uniform(high=None), "uniform: high must be a number, got NoneType"),
    (lambda: np.ones(3).sum(keepdims="yes"), "sum: keepdims must be True or False, got str"),
    (lambda: np.ones(6).reshape(2.0, 3), "reshape: the shape must be ints or a tuple of ints, "
                                         "got float"),
    (lambda: np.ones(6).reshape(), "reshape: the new shape is missing"),
    (lambda: np.ones(6).reshape((2, 3), shape=(3, 2)), "reshape: the shape is given twice"),
    (lambda: np.ones(6).reshape(6, size=6), "reshape: unexpected keyword argument 'size'"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(TypeError) as info:
        call()
    assert message in str(info.value)
    assert "incompatible function arguments" not in str(info.value)


def test_reshape_takes_shape_and_order_keywords_as_numpy():
    x = np.arange(6.0)
    assert x.reshape(shape=(3, 2)).shape == (3, 2)
    assert x.reshape(shape=6).shape == (6,)
    assert x.reshape((2, -1), order="C").shape == (2, 3)
    assert np.reshape(x, shape=(2, 3)).shape == (2, 3)
    assert np.reshape(x, newshape=(3, 2)).shape == (3, 2)
    assert np.reshape(x, (1, 6)).shape == (1, 6)
    assert np.reshape([1.0, 2.0], (2, 1)).shape == (2, 1)
    assert x.reshape(numpy.int64(2), 3).shape == (2, 3)
    with pytest.raises(ValueError, match="only order='C'"):
        x.reshape(6, order="F")


def test_reductions_take_data_as_numpy_does():
    assert np.sum([1, 2, 3]).item() == 6.0
    assert np.mean(numpy.arange(4.0)).item() == 1.5
    assert np.ones((2, 2)).sum(keepdims=numpy.bool_(True)).shape == (1, 1)


def test_truth_value_of_an_empty_array_is_numpy_2s_error():
    with pytest.raises(ValueError, match="empty array is ambiguous"):
        bool(np.array([]))
    with pytest.raises(ValueError, match="more than one element is ambiguous"):
        bool(np.ones(2))
    assert bool(np.ones(1)) and not bool(np.zeros(()))


def test_numpy_asarray_with_copy_false_raises_as_numpy_2_does():
    x = np.arange(3.0)
    with pytest.raises(ValueError, match="Unable to avoid copy"):
        numpy.asarray(x, copy=False)
    with pytest.raises(ValueError, match="Unable to avoid copy"):
        numpy.array(x, copy=False)
    a = numpy.asarray(x)
    assert a.dtype == numpy.float32 and a.tolist() == [0.0, 1.0, 2.0]
    b = numpy.asarray(x, dtype=numpy.float64)
    assert b.dtype == numpy.float64 and b.tolist() == [0.0, 1.0, 2.0]
    assert numpy.array(x, copy=True).tolist() == [0.0, 1.0, 2.0]


def test_pickle_copy_and_deepcopy_are_by_value():
    x = np.arange(6.0).reshape(2, 3)
    y = pickle.loads(pickle.dumps(x))
    assert isinstance(y, np.ndarray) and y.shape == (2, 3)
    numpy.testing.assert_array_equal(y.asnumpy(), x.asnumpy())
    for c in (copy.copy(x), copy.deepcopy(x)):
        numpy.testing.assert_array_equal(c.asnumpy(), x.asnumpy())
        x += 0  # a later write to x does not change the copies
    c = copy.copy(x)
    x += 1
    numpy.testing.assert_array_equal(c.asnumpy(), x.asnumpy() - 1)
    numpy.testing.assert_array_equal(y.asnumpy(), x.asnumpy() - 1)
    both = copy.deepcopy([x, x])
    assert both[0] is both[1]  # deepcopy's memo, as for any object
    assert pickle.loads(pickle.dumps(npx.cpu())) == npx.cpu()
    assert pickle.loads(pickle.dumps(npx.gpu(1))) == npx.gpu(1)
    assert pickle.loads(pickle.dumps(np.zeros(()))).shape == ()


def test_pickling_raises_the_failure_of_the_op_that_wrote_the_array():
    x = np.ones(3)

    def fail():
        raise KeyError("not written")

    de.engine().push(fail, writes=[x])
    with pytest.raises(KeyError):
        pickle.dumps(x)
    with pytest.raises(KeyError):
        npx.waitall()


def public_names(module):
    return {k for k in dir(module) if not k.startswith("_")}


def stub_names(path):
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def test_the_installed_package_ships_stubs_for_every_public_name():
    package = pathlib.Path(de.__file__).parent
    assert (package / "py.typed").is_file()
    stubs = package / "_depengine"
    for module, stub in [(_depengine, stubs / "__init__.pyi"),
                         (_depengine.np, stubs / "np" / "__init__.pyi"),
                         (_depengine.np.random, stubs / "np" / "random.pyi"),
                         (_depengine.npx, stubs / "npx.pyi")]:
        assert stub.is_file(), stub
        missing = public_names(module) - stub_names(stub)
        assert not missing, (stub, missing)
    # Every method of a class has a stub too.
    tree = ast.parse((stubs / "np" / "__init__.pyi").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ndarray")
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert {"asnumpy", "reshape", "sum", "wait_to_read", "__reduce__"} <= methods
