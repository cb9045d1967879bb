"""depengine.np / npx against NumPy's values, and their errors."""
import numpy
import pytest

from depengine import np, npx


def close(a, b):
    numpy.testing.assert_allclose(a.asnumpy(), b, rtol=1e-5, atol=1e-6)


def test_creation_matches_numpy():
    close(np.ones((2, 3)), numpy.ones((2, 3)))
    close(np.zeros(4), numpy.zeros(4))
    close(np.full((2, 2), 7), numpy.full((2, 2), 7.0))
    close(np.arange(5), numpy.arange(5.0))
    close(np.arange(1, 7, 2), numpy.arange(1.0, 7.0, 2.0))
    close(np.array([[1, 2], [3, 4]]), numpy.array([[1.0, 2.0], [3.0, 4.0]]))
    src = numpy.random.default_rng(0).standard_normal((3, 4))
    close(np.array(src), src.astype(numpy.float32))
    assert np.ones((2, 3), dtype=numpy.float32).dtype == numpy.float32
    assert np.ones(3, ctx=npx.cpu()).ctx == npx.cpu()
    assert np.zeros(3, device=npx.cpu()).device == npx.cpu()


def test_attributes_and_repr():
    x = np.ones((2, 3))
    assert x.shape == (2, 3) and x.size == 6 and x.ndim == 2 and x.dtype == numpy.float32
    assert repr(npx.cpu()) == "cpu(0)" and repr(npx.gpu(1)) == "gpu(1)"
    assert repr(np.ones((1, 2)) * np.ones((1, 2)) + 2) == "array([[3., 3.]])"
    assert len(x) == 2


def test_random_moments_and_seed():
    npx.seed(7)
    a = np.random.normal(size=(200, 200)).asnumpy()
    assert abs(a.mean()) < 0.02 and abs(a.std() - 1) < 0.02
    u = np.random.uniform(2, 3, size=(1000,)).asnumpy()
    assert u.min() >= 2 and u.max() < 3
    npx.seed(7)
    numpy.testing.assert_array_equal(np.random.normal(size=(200, 200)).asnumpy(), a)
    b = np.random.normal(5, 2, (3,))
    assert b.shape == (3,)


def test_arithmetic_broadcasting_and_comparisons():
    rng = numpy.random.default_rng(1)
    an = rng.standard_normal((3, 4)).astype(numpy.float32)
    bn = rng.standard_normal((4,)).astype(numpy.float32) + 3
    a, b = np.array(an), np.array(bn)
    close(a + b, an + bn)
    close(a - 1, an - 1)
    close(2 - a, 2 - an)
    close(a * b, an * bn)
    close(a / b, an / bn)
    close(1 / b, 1 / bn)
    close(b ** 2, bn ** 2)
    close(-a, -an)
    close(abs(a), numpy.abs(an))
    close(a > 0, (an > 0).astype(numpy.float32))
    close(a <= b, (an <= bn).astype(numpy.float32))
    close(a == a, numpy.ones((3, 4)))
    close(a != 0.5, (an != 0.5).astype(numpy.float32))
    close(numpy.ones(4) + b, 1 + bn)
    close(a @ a.T, an @ an.T)
    close(np.dot(a, b), an @ bn)


def test_inplace_keeps_identity():
    x = np.ones((2, 2))
    ident = id(x)
    x += 1
    x *= np.array([1, 2])
    x -= 0.5
    x /= 2
    assert id(x) == ident
    close(x, (numpy.ones((2, 2)) * 2 * numpy.array([1, 2]) - 0.5) / 2)


def test_functions_and_reductions():
    xn = numpy.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]], dtype=numpy.float32)
    x = np.array(xn)
    close(np.exp(x), numpy.exp(xn))
    close(np.log(np.abs(x)), numpy.log(numpy.abs(xn)))
    close(np.abs(x), numpy.abs(xn))
    close(np.maximum(x, 0), numpy.maximum(xn, 0))
    close(np.maximum(x, x * 2), numpy.maximum(xn, xn * 2))
    close(np.sum(x), numpy.sum(xn))
    close(np.sum(x, axis=0), numpy.sum(xn, axis=0))
    close(np.mean(x, axis=1), numpy.mean(xn, axis=1))
    close(np.max(x), numpy.max(xn))
    close(np.max(x, axis=-1, keepdims=True), numpy.max(xn, axis=-1, keepdims=True))
    close(x.sum(), xn.sum())
    close(x.mean(axis=0), xn.mean(axis=0))
    assert x.sum().item() == pytest.approx(float(xn.sum()))
    assert float(np.max(x)) == 4.0


def test_indexing_reshape_transpose():
    xn = numpy.arange(24, dtype=numpy.float32).reshape(4, 6)
    x = np.array(xn)
    close(x[1], xn[1])
    close(x[-1], xn[-1])
    close(x[1:3], xn[1:3])
    close(x[:, 2], xn[:, 2])
    close(x[::2, ::-3], xn[::2, ::-3])
    close(x[2, 3], xn[2, 3])
    close(x.reshape(3, 8), xn.reshape(3, 8))
    close(x.reshape((-1, 4)), xn.reshape(-1, 4))
    close(x.T, xn.T)
    with pytest.raises(IndexError):
        x[4]
    with pytest.raises(IndexError):
        x[0, 0, 0]
    with pytest.raises(TypeError, match="float"):
        x[1.5]


def test_asnumpy_is_a_copy_that_later_writes_do_not_change():
    x = np.arange(6).reshape(2, 3)
    a = x.asnumpy()
    del x
    numpy.testing.assert_array_equal(a, numpy.arange(6.0).reshape(2, 3))
    # A view of the array's storage changed under the caller (and could be read half-written)
    # when a later op wrote the array.
    y = np.zeros((1000, 1000))
    v = y.asnumpy()
    y += 1
    npx.waitall()
    assert v.sum() == 0.0
    v[0, 0] = 5.0  # the copy is the caller's
    assert y[0, 0].item() == 1.0


def test_ints_beyond_c_long_raise_overflow_error():
    # They ended in SystemError ("returned a result with an exception set").
    a = np.arange(6.0).reshape(2, 3)
    with pytest.raises(OverflowError):
        a[2**70]
    with pytest.raises(OverflowError):
        a.sum(axis=2**70)
    with pytest.raises(OverflowError):
        a.reshape(2**70)


def test_none_as_an_operand_gets_python_s_answer():
    # nanobind refused None before the operator ran ("incompatible function arguments").
    a = np.ones(3)
    with pytest.raises(TypeError, match="unsupported operand"):
        a + None
    assert (a == None) is False  # noqa: E711 (the operator is what is tested)
    assert (a != None) is True  # noqa: E711


def test_int_of_a_size_1_array():
    assert int(np.array(2.7)) == 2
    assert int(np.array([-3.5])) == -3
    with pytest.raises(TypeError, match="size-1"):
        int(np.ones(2))
    with pytest.raises(ValueError):
        int(np.array(float("nan")))


def test_iteration_is_numpy_s():
    # Python's fallback through __getitem__ made list() of a 0-d array an empty list.
    with pytest.raises(TypeError, match="0-d"):
        list(np.array(1.0))
    rows = list(np.arange(6.0).reshape(3, 2))
    assert len(rows) == 3
    close(rows[2], numpy.array([4.0, 5.0]))


def test_copy_and_ctx():
    x = np.ones(3)
    y = x.copyto(npx.cpu())
    z = x.as_in_ctx(npx.cpu())
    x += 1
    close(y, numpy.ones(3))
    assert z is not None
    npx.set_np()
    assert npx.num_gpus() >= 0


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"\(3,\).*\(4,\)"):
        np.ones(3) + np.ones(4)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(2, 3\)"):
        np.dot(np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(TypeError, match="int32"):
        np.ones(3, dtype="int32")
    with pytest.raises(TypeError, match="float64"):
        np.zeros(3, dtype=numpy.float64)
    with pytest.raises(TypeError, match="shape"):
        np.ones("abc")
    with pytest.raises(ValueError, match="negative"):
        np.ones((-1, 2))
    with pytest.raises(TypeError, match="ctx"):
        np.ones(3, ctx="cpu")
    with pytest.raises(TypeError, match="complex"):
        np.array([1j])
    with pytest.raises(ValueError, match="cannot reshape"):
        np.ones(6).reshape(4, 2)
    with pytest.raises(ValueError, match="axis 2"):
        np.sum(np.ones((2, 2)), axis=2)
    with pytest.raises(ValueError, match="gpu"):
        np.ones(3, ctx=npx.gpu(npx.num_gpus()))
    with pytest.raises(ValueError, match="size 1"):
        np.ones(2).item()
    with pytest.raises(TypeError):
        np.ones(2) + "x"


def test_failure_inside_an_op_is_raised_at_the_blocker():
    # log of a matrix product whose shapes only fail when... an op that raises inside:
    # a Python op failing the array's var poisons what reads it.
    import depengine as de
    e = de.engine()
    x = np.ones(3)
    def bad():
        raise ArithmeticError("inside the op")
    e.push(bad, writes=[x])
    y = x + 1                       # pushed, skipped: it reads a failed var
    with pytest.raises(ArithmeticError, match="inside the op"):
        y.asnumpy()
    with pytest.raises(ArithmeticError, match="inside the op"):
        npx.waitall()


def test_zero_d_and_empty_arrays():
    s = np.array(5.0)                      # numpy.ascontiguousarray would make it (1,)
    assert s.shape == () and s.ndim == 0 and s.item() == 5.0
    assert repr(s) == "array(5.)"
    with pytest.raises(IndexError, match="0-dimensional"):
        s[0]
    assert np.array(numpy.float32(2)).shape == ()
    close(np.array(numpy.arange(6.0).reshape(2, 3).T), numpy.arange(6.0).reshape(2, 3).T)
    z = np.zeros((0, 3))
    assert z.asnumpy().shape == (0, 3) and z.sum().item() == 0.0
    assert np.ones((2, 3))[1:1].shape == (0, 3)
    assert np.random.normal(size=()).shape == ()


def test_numpy_functions_take_depengine_arrays():
    # numpy.sum(a) calls a.sum(axis=None, dtype=None, out=None): nanobind refused out= with
    # "incompatible function arguments".
    a = np.arange(6.0).reshape(2, 3)
    assert numpy.sum(a).item() == 15.0
    assert numpy.mean(a).item() == 2.5
    assert numpy.max(a).item() == 5.0
    close(numpy.sum(a, axis=0), numpy.array([3.0, 5.0, 7.0]))
    assert a.sum(None, None, None, True).shape == (1, 1)  # NumPy's positional order
    with pytest.raises(TypeError, match="out="):
        a.sum(out=np.zeros(()))
    # `in` is (a == x).any(), as NumPy's; through the rows, a 2-d array raised ValueError.
    assert 3.0 in a and 7.0 not in a
    assert [3.0, 4.0, 5.0] in a and None not in a


def test_format_tolist_astype():
    # format() of a 0-d array, tolist() and astype() were missing (TypeError, AttributeError).
    assert format(np.array(1.5), ".2f") == "1.50"
    assert f"{np.array(2.0):>6.1f}" == "   2.0"
    assert format(np.ones(2)) == str(np.ones(2))
    with pytest.raises(TypeError, match="format"):
        format(np.ones(2), ".2f")
    assert np.arange(4.0).reshape(2, 2).tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert np.array(3.0).tolist() == 3.0
    a = np.ones(3)
    b = a.astype("float32")
    assert b is not a and b.dtype == numpy.float32
    a += 1
    close(b, numpy.ones(3))                  # a copy
    assert a.astype(numpy.float32, copy=False) is a
    with pytest.raises(TypeError, match="float64"):
        a.astype("float64")


def test_numpy_integers_index_and_bools_do_not():
    a = np.arange(5.0)
    assert a[numpy.int64(3)].item() == 3.0
    assert a[numpy.int32(-1)].item() == 4.0
    with pytest.raises(TypeError, match="bool"):
        a[True]


def test_integer_arguments_out_of_range_name_the_argument():
    # Values beyond C int gave nanobind's "incompatible function arguments".
    import depengine as de
    with pytest.raises(ValueError, match=r"cpu_threads must be in \[0, "):
        de.Engine("threaded", cpu_threads=2**31)
    with pytest.raises(ValueError, match="cpu_threads"):
        de.Engine("threaded", cpu_threads=-5)
    with pytest.raises(ValueError, match="max_inflight"):
        de.Engine("threaded", max_inflight=2**70)
    with pytest.raises(TypeError, match="sim_gpus must be an int"):
        de.Engine("threaded", sim_gpus=1.5)
    with pytest.raises(ValueError, match="device_id"):
        npx.gpu(2**40)
    with pytest.raises(ValueError, match="device_id"):
        npx.cpu(1)
    assert npx.gpu(numpy.int64(1)) == npx.gpu(1)
    with pytest.raises(ValueError, match="seed"):
        np.random.seed(2**70)
    with pytest.raises(ValueError, match="priority"):
        de.engine().push(lambda: None, priority=2**40)
    with pytest.raises(TypeError, match="name must be a str"):
        de.engine().push(lambda: None, name=None)
    with pytest.raises(TypeError, match="cpu_threads must be an int"):
        de.Engine("threaded", cpu_threads=None)
    with pytest.raises(TypeError, match="device_id must be an int"):
        npx.gpu(None)
