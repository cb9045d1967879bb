"""depengine.autograd from Python: the gradient of every differentiable op against central
differences of the op's NumPy float64 equivalent (broadcasting cases included), grad_req
'add', retain_graph, pause, the errors, and dropout's masks (seeded, scaled, the same bits on
the naive engine and the threaded one with 1, 2 and 4 workers)."""
import numpy as onp
import pytest

import depengine as de
from depengine import autograd, np, npx


def _numeric(f, xs, w, eps=1e-6):
    """Central differences of sum(f(*xs) * w) in float64, for each input."""
    grads = []
    for i, x in enumerate(xs):
        g = onp.zeros_like(x)
        for j in range(x.size):
            plus = [a.copy() for a in xs]
            minus = [a.copy() for a in xs]
            plus[i].flat[j] += eps
            minus[i].flat[j] -= eps
            g.flat[j] = (onp.sum(f(*plus) * w) - onp.sum(f(*minus) * w)) / (2 * eps)
        grads.append(g)
    return grads


def check(f, f64, *shapes, lo=-1.0, hi=1.0, seed=0, tol=2e-3):
    rng = onp.random.default_rng(seed)
    xs = [rng.uniform(lo, hi, s).astype(onp.float32) for s in shapes]
    arrays = [np.array(x) for x in xs]
    for a in arrays:
        a.attach_grad()
    with autograd.record():
        y = f(*arrays)
    w = rng.uniform(0.5, 1.5, y.shape).astype(onp.float32)
    y.backward(np.array(w))
    want = _numeric(f64, [x.astype(onp.float64) for x in xs], w.astype(onp.float64))
    onp.testing.assert_allclose(y.asnumpy(), f64(*[x.astype(onp.float64) for x in xs]),
                                rtol=1e-4, atol=1e-4)
    for a, g in zip(arrays, want):
        onp.testing.assert_allclose(a.grad.asnumpy(), g, rtol=tol, atol=tol)


def _softmax(z):
    e = onp.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


CASES = [
    # name, depengine, numpy float64, shapes, value range
    ("add broadcast", lambda a, b: a + b, lambda a, b: a + b, [(2, 3), (3,)], (-1, 1)),
    ("sub column", lambda a, b: a - b, lambda a, b: a - b, [(2, 3), (2, 1)], (-1, 1)),
    ("mul 3-d", lambda a, b: a * b, lambda a, b: a * b, [(2, 1, 4), (3, 1)], (-1, 1)),
    ("div", lambda a, b: a / b, lambda a, b: a / b, [(2, 3), (1, 3)], (0.5, 2)),
    ("pow", lambda a, b: a ** b, lambda a, b: a ** b, [(2, 3), (3,)], (0.5, 2)),
    ("maximum", np.maximum, onp.maximum, [(3, 4), (4,)], (-1, 1)),
    ("minimum", np.minimum, onp.minimum, [(3, 4), (3, 1)], (-1, 1)),
    ("maximum scalar", lambda a: np.maximum(a, 0), lambda a: onp.maximum(a, 0), [(5,)], (-1, 1)),
    ("minimum scalar", lambda a: np.minimum(a, 0.2), lambda a: onp.minimum(a, 0.2), [(5,)], (-1, 1)),
    ("scalar forms", lambda a: (a + 2) * 3 - 1 / (a + 2) + (2 - a) / 4 + a ** 2 + 2 ** a,
     lambda a: (a + 2) * 3 - 1 / (a + 2) + (2 - a) / 4 + a ** 2 + 2 ** a, [(6,)], (-1, 1)),
    ("neg exp log", lambda a: -np.exp(a) + np.log(a), lambda a: -onp.exp(a) + onp.log(a), [(6,)], (0.5, 2)),
    ("relu sigmoid tanh", lambda a: npx.relu(a) + npx.sigmoid(a) * np.tanh(a),
     lambda a: onp.maximum(a, 0) + onp.tanh(a) / (1 + onp.exp(-a)), [(7,)], (-2, 2)),
    ("sqrt abs square", lambda a: np.sqrt(np.abs(a)) + np.square(a),
     lambda a: onp.sqrt(onp.abs(a)) + onp.square(a), [(6,)], (-2, 2)),
    ("sum all", lambda a: a.sum(), lambda a: a.sum(), [(3, 4)], (-1, 1)),
    ("sum axis keepdims", lambda a: a.sum(axis=1, keepdims=True) * a,
     lambda a: a.sum(axis=1, keepdims=True) * a, [(3, 4)], (-1, 1)),
    ("sum tuple axis", lambda a: np.sum(a, axis=(0, 2)), lambda a: a.sum(axis=(0, 2)), [(2, 3, 4)], (-1, 1)),
    ("mean", lambda a: a.mean() + a.mean(axis=0), lambda a: a.mean() + a.mean(axis=0), [(3, 4)], (-1, 1)),
    ("mean tuple axis", lambda a: a.mean(axis=(2, 0)), lambda a: a.mean(axis=(2, 0)), [(2, 3, 4)], (-1, 1)),
    ("max", lambda a: a.max() + a.max(axis=1), lambda a: a.max() + a.max(axis=1), [(3, 4)], (-1, 1)),
    ("max tuple axis", lambda a: a.max(axis=(0, 1)), lambda a: a.max(axis=(0, 1)), [(2, 3, 4)], (-1, 1)),
    ("dot 2-d", np.dot, onp.dot, [(3, 4), (4, 2)], (-1, 1)),
    ("dot 1-d", np.dot, onp.dot, [(4,), (4,)], (-1, 1)),
    ("dot matrix vector", np.dot, onp.dot, [(3, 4), (4,)], (-1, 1)),
    ("matmul batched broadcast", lambda a, b: a @ b, lambda a, b: a @ b, [(2, 1, 3, 4), (3, 4, 2)], (-1, 1)),
    ("matmul vector batch", np.matmul, onp.matmul, [(4,), (2, 4, 3)], (-1, 1)),
    ("T", lambda a: a.T, lambda a: a.T, [(3, 4)], (-1, 1)),
    ("transpose axes", lambda a: np.transpose(a, (1, 2, 0)), lambda a: onp.transpose(a, (1, 2, 0)),
     [(2, 3, 4)], (-1, 1)),
    ("transpose method", lambda a: a.transpose(2, 0, 1), lambda a: a.transpose(2, 0, 1), [(2, 3, 4)], (-1, 1)),
    ("reshape", lambda a: a.reshape(4, 3) * np.arange(3), lambda a: a.reshape(4, 3) * onp.arange(3),
     [(3, 4)], (-1, 1)),
    ("copy", lambda a: a.copy() * 2, lambda a: a.copy() * 2, [(3,)], (-1, 1)),
    ("slices", lambda a: a[1:, ::-2], lambda a: a[1:, ::-2], [(3, 5)], (-1, 1)),
    ("integer index", lambda a: a[1, 2] * a[-1], lambda a: a[1, 2] * a[-1], [(3, 4)], (-1, 1)),
    ("ellipsis and none", lambda a: a[..., 1][:, None], lambda a: a[..., 1][:, None], [(2, 3, 4)], (-1, 1)),
    ("list index repeats", lambda a: a[[2, 0, 2]], lambda a: a[[2, 0, 2]], [(3, 2)], (-1, 1)),
    ("array index", lambda a: a[np.array([1, 1, 0])], lambda a: a[onp.array([1, 1, 0])], [(3, 2)], (-1, 1)),
    ("pairs", lambda a: a[range(3), np.array([2, 0, 1])], lambda a: a[range(3), onp.array([2, 0, 1])],
     [(3, 4)], (-1, 1)),
    ("column index", lambda a: a[:, [3, 0]], lambda a: a[:, [3, 0]], [(2, 4)], (-1, 1)),
    ("bool mask", lambda a: a[onp.array([True, False, True])], lambda a: a[onp.array([True, False, True])],
     [(3, 2)], (-1, 1)),
    ("bool mask 2-d", lambda a: a[onp.array([[True, False], [False, True]])],
     lambda a: a[onp.array([[True, False], [False, True]])], [(2, 2)], (-1, 1)),
    ("concatenate", lambda a, b: np.concatenate([a, b, a], axis=1),
     lambda a, b: onp.concatenate([a, b, a], axis=1), [(2, 1), (2, 3)], (-1, 1)),
    ("concatenate axis None", lambda a, b: np.concatenate([a, b], axis=None),
     lambda a, b: onp.concatenate([a, b], axis=None), [(2, 2), (3,)], (-1, 1)),
    ("stack", lambda a, b: np.stack([a, b], axis=-1), lambda a, b: onp.stack([a, b], axis=-1),
     [(2, 3), (2, 3)], (-1, 1)),
    ("mod", lambda a, b: a % b, lambda a, b: onp.mod(a, b), [(2, 3), (3,)], (1.1, 2.9)),
    ("mod scalar", lambda a: np.mod(a, 0.7) + 5 % a, lambda a: onp.mod(a, 0.7) + onp.mod(5, a), [(4,)], (1.1, 2.9)),
    ("floor divide in a graph", lambda a: a * (a // 0.5), lambda a: a * (a // 0.5), [(5,)], (0.1, 2.9)),
    ("comparison in a graph", lambda a, b: a * (a > b) + b * (a <= b),
     lambda a, b: a * (a > b) + b * (a <= b), [(6,), (6,)], (-1, 1)),
    ("linalg.norm", lambda a: np.linalg.norm(a), lambda a: onp.linalg.norm(a), [(3, 4)], (-1, 1)),
    ("cumsum", lambda a: a.cumsum(axis=0), lambda a: a.cumsum(axis=0), [(3, 2)], (-1, 1)),
    ("softmax cross-entropy (d2l)",
     lambda z: -np.log((np.exp(z) / np.exp(z).sum(1, keepdims=True))[range(3), np.array([2, 0, 1])]),
     lambda z: -onp.log(_softmax(z)[range(3), onp.array([2, 0, 1])]), [(3, 4)], (-2, 2)),
]


@pytest.mark.parametrize("name,f,f64,shapes,rng", CASES, ids=[c[0] for c in CASES])
def test_gradient_matches_float64_central_differences(name, f, f64, shapes, rng):
    check(f, f64, *shapes, lo=rng[0], hi=rng[1])


def test_dropout_gradient_is_its_mask():
    x = np.ones((200,))
    x.attach_grad()
    with autograd.record():
        y = npx.dropout(x, 0.4)
    y.backward()
    onp.testing.assert_array_equal(x.grad.asnumpy(), y.asnumpy())


def test_grad_req_add_accumulates():
    x = np.array([1.0, 2.0, 3.0])
    x.attach_grad(grad_req="add")
    for _ in range(3):
        with autograd.record():
            y = (x * x).sum()
        y.backward()
    onp.testing.assert_allclose(x.grad.asnumpy(), 3 * 2 * onp.array([1, 2, 3]))


def test_retain_graph_allows_a_second_backward_and_its_absence_refuses_one():
    x = np.array([1.0, -2.0])
    x.attach_grad()
    with autograd.record():
        y = (x * x * x).sum()
    y.backward(retain_graph=True)
    onp.testing.assert_allclose(x.grad.asnumpy(), [3.0, 12.0])
    y.backward()
    onp.testing.assert_allclose(x.grad.asnumpy(), [3.0, 12.0])
    with pytest.raises(de.Error, match="retain_graph"):
        y.backward()


def test_pause_records_nothing():
    x = np.array([1.0, 2.0])
    x.attach_grad()
    with autograd.record():
        y = x * 2
        with autograd.pause():
            assert not autograd.is_recording()
            z = x * 3
        w = y + z
    w.backward()
    onp.testing.assert_allclose(x.grad.asnumpy(), [2.0, 2.0])  # z is a constant
    with pytest.raises(de.Error, match="no autograd history"):
        z.backward()


def test_backward_without_history_raises():
    with pytest.raises(de.Error, match="no autograd history"):
        np.ones((3,)).backward()
    x = np.ones((2,))
    x.attach_grad()
    y = x * 2  # not recorded
    with pytest.raises(de.Error, match="no autograd history"):
        y.backward()


def test_setitem_while_recording_is_refused_on_arrays_with_history():
    x = np.ones((3,))
    x.attach_grad()
    with autograd.record():
        y = x * 2
        with pytest.raises(ValueError, match="setitem"):
            y[0] = 5
    y[0] = 5  # outside record: an ordinary write
    onp.testing.assert_array_equal(y.asnumpy(), [5, 2, 2])


def test_writes_through_indexing():
    X = np.arange(12).reshape(3, 4)
    X[1, 2] = 9
    X[0:2, :] = 12
    assert X.asnumpy().tolist() == [[12] * 4, [12] * 4, [8, 9, 10, 11]]
    Z = np.zeros_like(X)
    Z[:] = X + 1
    onp.testing.assert_array_equal(Z.asnumpy(), X.asnumpy() + 1)
    Z[:, 1] = np.array([7, 8, 9])
    assert Z.asnumpy()[:, 1].tolist() == [7, 8, 9]
    Z[..., -1] = [1, 2, 3]
    assert Z.asnumpy()[:, -1].tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="broadcast"):
        Z[0] = np.ones((3,))
    with pytest.raises(IndexError):
        Z[[0, 1]] = 1


def test_mod_and_floor_divide_match_numpy():
    a = onp.array([7, -7, 7, -7, 6.5, 0], dtype=onp.float32)
    b = onp.array([3, 3, -3, -3, 2, -2], dtype=onp.float32)
    x, y = np.array(a), np.array(b)
    onp.testing.assert_array_equal((x % y).asnumpy(), onp.mod(a, b))
    onp.testing.assert_array_equal((x // y).asnumpy(), onp.floor_divide(a, b))
    onp.testing.assert_array_equal((x % 4).asnumpy(), onp.mod(a, onp.float32(4)))
    onp.testing.assert_array_equal((10 // y).asnumpy(), onp.floor_divide(onp.float32(10), b))
    onp.testing.assert_array_equal(np.remainder(x, 2.5).asnumpy(), onp.remainder(a, onp.float32(2.5)))


def test_creation_and_shape_functions_match_numpy():
    onp.testing.assert_allclose(np.linspace(-1, 2, 7).asnumpy(), onp.linspace(-1, 2, 7), rtol=1e-6)
    onp.testing.assert_allclose(np.linspace(0, 1, 4, endpoint=False).asnumpy(), onp.linspace(0, 1, 4, endpoint=False))
    assert np.empty((2, 3)).shape == (2, 3)
    assert np.ones_like(np.zeros((2, 2))).asnumpy().tolist() == [[1, 1], [1, 1]]
    a = onp.arange(24, dtype=onp.float32).reshape(2, 3, 4)
    x = np.array(a)
    onp.testing.assert_array_equal(x.T.asnumpy(), a.T)
    onp.testing.assert_array_equal(np.stack([x, x], axis=1).asnumpy(), onp.stack([a, a], axis=1))
    onp.testing.assert_array_equal(x.sum(axis=(0, 2), keepdims=True).asnumpy(), a.sum(axis=(0, 2), keepdims=True))
    onp.testing.assert_array_equal(x[x.asnumpy() > 10].asnumpy(), a[a > 10])
    with pytest.raises(ValueError, match="axis"):
        x.sum(axis=(0, 0))


def _dropout_run(engine, seed):
    with engine:
        np.random.seed(seed)
        w = np.random.normal(0, 1, (64, 32))
        w.attach_grad()
        with autograd.record():
            h = npx.dropout(npx.relu(np.ones((3, 8, 64)) @ w), 0.3)
            loss = h[:, [0, 2, 2]].sum(axis=(0, 2))
        loss.backward()
        return h.asnumpy(), w.grad.asnumpy()


def test_dropout_masks_are_seeded_and_the_same_bits_on_every_engine():
    ref_h, ref_g = _dropout_run(de.Engine("naive"), 7)
    assert 0.25 < (ref_h != 0).mean() < 0.45  # relu keeps about half, dropout 70% of those
    for n in (1, 2, 4):
        h, g = _dropout_run(de.Engine("threaded", cpu_threads=n), 7)
        assert h.tobytes() == ref_h.tobytes(), n
        assert g.tobytes() == ref_g.tobytes(), n
    other, _ = _dropout_run(de.Engine("naive"), 8)
    assert other.tobytes() != ref_h.tobytes()


def test_dropout_scales_kept_elements_and_is_identity_outside_training():
    x = np.ones((4000,))
    assert npx.dropout(x, 0.5).asnumpy().tolist() == x.asnumpy().tolist()
    with autograd.record():
        y = npx.dropout(x, 0.25).asnumpy()
    assert set(onp.unique(y).tolist()) == {0.0, onp.float32(1 / 0.75)}
    assert abs((y != 0).mean() - 0.75) < 0.03
    with autograd.record(train_mode=False):
        assert npx.dropout(x, 0.5).asnumpy().tolist() == x.asnumpy().tolist()
    assert (npx.dropout(x, 0.5, mode="always").asnumpy() == 0).any()
    with pytest.raises(ValueError, match="probability"):
        npx.dropout(x, 1.0)


def test_comparison_routed_gradients_run_on_a_simulated_gpu():
    """relu, abs, max and maximum route gradients through comparisons, which once refused
    GPU arrays; on a simulated GPU they give the CPU's bits."""
    def grads(ctx):
        x = np.array([[-2.0, 3.0, 0.5], [3.0, -1.0, 2.0]], ctx=ctx)
        x.attach_grad()
        with autograd.record():
            l = (npx.relu(x) + np.abs(x) * 2 + np.maximum(x, 0.7)).sum() + x.max() + \
                x.max(axis=1).sum() + x[1, ::2].sum() + (x % 1.5).sum()
        l.backward()
        assert x.grad.ctx == ctx
        return x.grad.asnumpy()

    with de.Engine("threaded", cpu_threads=2, sim_gpus=1):
        assert grads(npx.gpu(0)).tobytes() == grads(npx.cpu()).tobytes()


def test_a_comparison_result_indexes_as_a_boolean_mask():
    # It indexed as integer positions 0 and 1 (a silent wrong answer) before.
    data = onp.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]], dtype=onp.float32)
    x = np.array(data)
    onp.testing.assert_array_equal(x[x > 0].asnumpy(), data[data > 0])
    rows = np.array(data[:, 0]) > 0
    onp.testing.assert_array_equal(x[rows].asnumpy(), data[data[:, 0] > 0])
    # An array that is not a comparison's result indexes by position, 0/1 values or not, and
    # so does a comparison's result once written in place.
    onp.testing.assert_array_equal(x[np.array([1.0, 0.0])].asnumpy(), data[[1, 0]])
    m = np.array(data[:, 0]) > 0
    m += 0.0
    onp.testing.assert_array_equal(x[m].asnumpy(), data[[1, 0]])
    x.attach_grad()
    with autograd.record():
        y = (x[x > 0] * 2.0).sum()
    y.backward()
    onp.testing.assert_array_equal(x.grad.asnumpy(), (data > 0) * 2.0)
