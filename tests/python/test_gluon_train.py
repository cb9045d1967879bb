"""Training with depengine.gluon: the fused optimizer ops and gluon.Trainer against MXNet's
formulas over several steps, gradients of layers and losses (eager and hybridized), a small
run that converges, determinism across engines (dropout included), and the errors."""
import math

import numpy
import pytest

import depengine as de
from depengine import autograd, gluon, init, np
from depengine._depengine import _optim
from depengine.gluon import nn


def grads_for(step, shape):
    r = numpy.random.default_rng(100 + step)
    return (r.standard_normal(shape) * 2).astype(numpy.float32)


W0 = numpy.random.default_rng(9).standard_normal((3, 4)).astype(numpy.float32)


def run_trainer(optimizer, params, steps=5, batch_size=4):
    """A (3, 4) parameter trained by `optimizer`; its gradient at step s is grads_for(s)
    (the gradient of sum(w * c))."""
    p = gluon.Parameter("w_weight", shape=(3, 4))
    p.initialize(init=init.Constant(0.0))
    p.set_data(np.array(W0))
    trainer = gluon.Trainer([p], optimizer, params)
    for s in range(steps):
        c = np.array(grads_for(s, (3, 4)))
        with autograd.record():
            l = (p.data() * c).sum()
        l.backward()
        trainer.step(batch_size)
    return p.data().asnumpy()


def clip(x, b):
    return x if not b else numpy.clip(x, -b, b)


def test_sgd_with_momentum_and_weight_decay():
    lr, mom, wd, bs = 0.1, 0.9, 0.01, 4
    w, m = W0.astype(numpy.float64), numpy.zeros((3, 4))
    for s in range(5):
        g = clip(grads_for(s, (3, 4)) / bs, 0.3)
        m = mom * m - lr * wd * w - lr * g
        w = w + m
    got = run_trainer("sgd", {"learning_rate": lr, "momentum": mom, "wd": wd,
                              "clip_gradient": 0.3})
    numpy.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_plain_sgd_rescales_by_the_batch_size():
    w = W0.astype(numpy.float64)
    for s in range(5):
        w = w - 0.5 * grads_for(s, (3, 4)) / 8
    numpy.testing.assert_allclose(run_trainer("sgd", {"learning_rate": 0.5}, batch_size=8), w,
                                  rtol=1e-5, atol=1e-6)


def test_adam_bias_correction_through_the_learning_rate():
    lr, b1, b2, eps, wd, bs = 0.01, 0.9, 0.999, 1e-8, 0.001, 4
    w, m, v = W0.astype(numpy.float64), numpy.zeros((3, 4)), numpy.zeros((3, 4))
    for s in range(5):
        t = s + 1
        g = grads_for(s, (3, 4)) / bs + wd * w
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        w = w - lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m / (numpy.sqrt(v) + eps)
    got = run_trainer("adam", {"learning_rate": lr, "wd": wd})
    numpy.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_adadelta():
    rho, eps, bs = 0.9, 1e-5, 4
    w, ag, ad = W0.astype(numpy.float64), numpy.zeros((3, 4)), numpy.zeros((3, 4))
    for s in range(5):
        g = grads_for(s, (3, 4)) / bs
        ag = rho * ag + (1 - rho) * g * g
        d = numpy.sqrt(ad + eps) / numpy.sqrt(ag + eps) * g
        ad = rho * ad + (1 - rho) * d * d
        w = w - d
    numpy.testing.assert_allclose(run_trainer("adadelta", {}), w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("centered", [False, True])
def test_rmsprop(centered):
    lr, g1, g2, eps, bs = 0.01, 0.9, 0.9, 1e-8, 4
    w = W0.astype(numpy.float64)
    n, mg, delta = (numpy.zeros((3, 4)) for _ in range(3))
    for s in range(5):
        g = grads_for(s, (3, 4)) / bs
        n = (1 - g1) * g * g + g1 * n
        if centered:
            mg = (1 - g1) * g + g1 * mg
            delta = g2 * delta - lr * g / numpy.sqrt(n - mg * mg + eps)
            w = w + delta
        else:
            w = w - lr * g / numpy.sqrt(n + eps)
    got = run_trainer("rmsprop", {"learning_rate": lr, "centered": centered})
    numpy.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_lr_mult_and_set_learning_rate():
    p = gluon.Parameter("w_weight", shape=(2,), lr_mult=0.5)
    p.initialize(init=init.Zero())
    trainer = gluon.Trainer([p], "sgd", {"learning_rate": 1.0})
    for lr in (1.0, 0.1):
        trainer.set_learning_rate(lr)
        with autograd.record():
            l = p.data().sum()
        l.backward()
        trainer.step(1)
    numpy.testing.assert_allclose(p.data().asnumpy(), [-0.55, -0.55], rtol=1e-6)


def test_plain_sgd_of_several_parameters_as_one_update_each():
    """Trainer.step's plain SGD pushes the updates of all parameters by one call
    (_optim.sgd_update_many): the same bits as one sgd_update per parameter with its lr_mult
    and wd_mult, over several steps; a parameter skipped as stale keeps its value."""
    r = numpy.random.default_rng(11)
    shapes = [(3, 4), (4,), (2, 2), (3,)]
    mults = [(1.0, 1.0), (0.5, 0.0), (2.0, 3.0), (1.0, 1.0)]
    params = []
    for k, (shape, (lm, wm)) in enumerate(zip(shapes, mults)):
        p = gluon.Parameter(f"p{k}_weight", shape=shape, lr_mult=lm, wd_mult=wm)
        p.initialize(init=init.Zero())
        p.set_data(np.array(r.standard_normal(shape).astype(numpy.float32)))
        params.append(p)
    ref = [np.array(p.data().asnumpy()) for p in params]
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.3, "wd": 0.01,
                                            "clip_gradient": 0.5})
    for s in range(4):
        used = params[:3]  # the last one is not in the forward: stale, skipped
        cs = [np.array(grads_for(10 * s + k, p.shape)) for k, p in enumerate(used)]
        with autograd.record():
            l = (used[0].data() * cs[0]).sum()
            for p, c in zip(used[1:], cs[1:]):
                l = l + (p.data() * c).sum()
        l.backward()
        trainer.step(2, ignore_stale_grad=True)
        for k, c in enumerate(cs):
            lm, wm = mults[k]
            _optim.sgd_update(ref[k], c, lr=0.3 * lm, wd=0.01 * wm, rescale_grad=0.5,
                              clip_gradient=0.5)
    for p, w in zip(params, ref):
        assert p.data().asnumpy().tobytes() == w.asnumpy().tobytes(), p.name
    with pytest.raises(ValueError, match="one of each per weight"):
        _optim.sgd_update_many([ref[0]], [], lrs=[0.1], wds=[0.0])


def test_fused_ops_directly_and_their_errors():
    w, g, m = np.ones((2, 3)), np.full((2, 3), 2.0), np.zeros((2, 3))
    _optim.sgd_mom_update(w, g, m, lr=0.1, momentum=0.5)
    numpy.testing.assert_allclose(w.asnumpy(), numpy.full((2, 3), 0.8), rtol=1e-6)
    numpy.testing.assert_allclose(m.asnumpy(), numpy.full((2, 3), -0.2), rtol=1e-6)
    with pytest.raises(ValueError, match=r"gradient's shape \(3, 2\) differs from the weight's"):
        _optim.sgd_update(w, np.ones((3, 2)), lr=0.1)
    with pytest.raises(ValueError, match="beta1 must be in"):
        _optim.adam_update(w, g, m, np.zeros((2, 3)), lr=0.1, beta1=2.0)
    with pytest.raises(ValueError, match="shares its storage"):
        _optim.adam_update(w, g, m, m, lr=0.1)
    nan = np.array([float("nan"), 1.0])
    _optim.reset_arrays([nan])
    assert nan.asnumpy().tolist() == [0.0, 0.0]


# ---- Gradients through layers and losses ----

def test_softmax_cross_entropy_per_sample_as_the_weighted_path():
    """SoftmaxCrossEntropyLoss() returns the fused op's (batch,) losses directly; with
    weight=1.0 it goes through the reshape and the weighted mean: the same shape, the same
    bits, and the same gradient bits."""
    r = numpy.random.default_rng(6)
    pred = r.standard_normal((5, 7)).astype(numpy.float32)
    label = r.integers(0, 7, 5).astype(numpy.float32)
    out = []
    for loss in (gluon.loss.SoftmaxCrossEntropyLoss(),
                 gluon.loss.SoftmaxCrossEntropyLoss(weight=1.0)):
        x = np.array(pred)
        x.attach_grad()
        with autograd.record():
            l = loss(x, np.array(label))
        l.backward()
        out.append((l.shape, l.asnumpy().tobytes(), x.grad.asnumpy().tobytes()))
    assert out[0][0] == (5,)
    assert out[0] == out[1]


def numeric_grad(f, x, eps=1e-3):
    """Central differences of the scalar f (float64 NumPy) at x."""
    g = numpy.zeros_like(x)
    for i in numpy.ndindex(x.shape):
        d = numpy.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def test_dense_and_loss_gradients_match_finite_differences():
    np.random.seed(1)
    net = nn.Sequential()
    net.add(nn.Dense(5, activation="tanh"), nn.Dense(3))
    net.initialize(init.Normal(0.5))
    X = numpy.random.default_rng(2).standard_normal((4, 6)).astype(numpy.float32)
    y = numpy.array([0, 2, 1, 2], dtype=numpy.float32)
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    with autograd.record():
        l = loss(net(np.array(X)), np.array(y))
    l.backward()
    w0 = net[0].weight.data().asnumpy().astype(numpy.float64)
    b0 = net[0].bias.data().asnumpy().astype(numpy.float64)
    w1 = net[1].weight.data().asnumpy().astype(numpy.float64)
    b1 = net[1].bias.data().asnumpy().astype(numpy.float64)

    def total(w0_):
        z = numpy.tanh(X @ w0_.T + b0) @ w1.T + b1
        z = z - z.max(axis=1, keepdims=True)
        lp = z - numpy.log(numpy.exp(z).sum(axis=1, keepdims=True))
        return -lp[numpy.arange(4), y.astype(int)].sum()

    numpy.testing.assert_allclose(net[0].weight.grad().asnumpy(), numeric_grad(total, w0),
                                  rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("make", [
    lambda: gluon.loss.L2Loss(), lambda: gluon.loss.L1Loss(),
    lambda: gluon.loss.SigmoidBinaryCrossEntropyLoss()])
def test_loss_gradients(make):
    r = numpy.random.default_rng(4)
    pred = r.standard_normal((3, 4)).astype(numpy.float32)
    label = (r.random((3, 4)) > 0.5).astype(numpy.float32)
    loss = make()
    x = np.array(pred)
    x.attach_grad()
    with autograd.record():
        l = loss(x, np.array(label))
    l.backward()

    def f(p):
        return float(loss(np.array(p.astype(numpy.float32)), np.array(label)).asnumpy()
                     .astype(numpy.float64).sum())

    numpy.testing.assert_allclose(x.grad.asnumpy(), numeric_grad(f, pred.astype(numpy.float64), 1e-2),
                                  rtol=2e-2, atol=2e-3)


def test_hybridized_gradients_equal_eager():
    def build():
        np.random.seed(5)
        net = nn.HybridSequential()
        net.add(nn.Dense(8, activation="relu"), nn.Dense(2))
        net.initialize(init.Xavier())
        return net

    X = np.random.normal(size=(6, 3))
    results = []
    for hybrid in (False, True):
        net = build()
        if hybrid:
            net.hybridize()
        for _ in range(2):
            with autograd.record():
                l = gluon.loss.L2Loss()(net(X), np.ones((6, 2)))
            l.backward()
        results.append([p.grad().asnumpy() for p in net.collect_params().values()]
                       + [net(X).asnumpy()])
    for a, b in zip(*results):
        numpy.testing.assert_array_equal(a, b)


def test_dense_gradients_are_written_into_their_buffers_without_a_copy():
    # grad_req='write': backward computes each Dense parameter's gradient straight into its
    # buffer (before: one copy_into op per parameter and step), with the same bits as
    # autograd.grad's new arrays; the buffers stay the arrays grad() returns.
    np.random.seed(3)
    net = nn.Sequential()
    net.add(nn.Dense(8, activation="relu"), nn.Dense(2))
    net.initialize(init.Xavier())
    X = np.random.normal(size=(6, 3))
    net(X)
    params = list(net.collect_params().values())
    buffers = [p.grad() for p in params]
    e = de.engine()
    with de.record(e) as rec:
        with autograd.record():
            l = gluon.loss.L2Loss()(net(X), np.ones((6, 2)))
        want = autograd.grad([l], [p.data() for p in params], retain_graph=True)
        l.backward()
    e.wait_all()
    assert "copy_into" not in rec.graph().node_names()
    for p, b, w in zip(params, buffers, want):
        numpy.testing.assert_array_equal(p.grad().asnumpy(), w.asnumpy())
        numpy.testing.assert_array_equal(b.asnumpy(), w.asnumpy())


def test_grad_req_add_accumulates_and_zero_grad_resets():
    p = gluon.Parameter("w_weight", shape=(3,), grad_req="add")
    p.initialize(init=init.One())
    for _ in range(3):
        with autograd.record():
            l = (p.data() * 2.0).sum()
        l.backward()
    numpy.testing.assert_allclose(p.grad().asnumpy(), [6, 6, 6])
    p.zero_grad()
    numpy.testing.assert_allclose(p.grad().asnumpy(), [0, 0, 0])
    q = gluon.Parameter("q_weight", shape=(2,), grad_req="null")
    q.initialize()
    with pytest.raises(RuntimeError, match="grad_req='null'"):
        q.grad()


def test_stale_gradient_is_an_error_unless_ignored():
    net = nn.Sequential()
    net.add(nn.Dense(2, in_units=3), nn.Dense(2, in_units=3))
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), "sgd")
    with autograd.record():
        l = net[0](np.ones((1, 3))).sum()
    l.backward()
    with pytest.raises(UserWarning, match=f"Parameter `{net[1].weight.name}`.*ignore_stale_grad"):
        trainer.step(1)
    before = net[1].weight.data().asnumpy()
    with autograd.record():
        l = net[0](np.ones((1, 3))).sum()
    l.backward()
    trainer.step(1, ignore_stale_grad=True)
    numpy.testing.assert_array_equal(net[1].weight.data().asnumpy(), before)


# ---- Dropout ----

def test_dropout_only_while_recording_in_train_mode():
    x = np.ones((200, 100))
    drop = nn.Dropout(0.3)
    np.random.seed(11)
    with autograd.record():
        y = drop(x).asnumpy()
    zeros = (y == 0).mean()
    assert 0.27 < zeros < 0.33
    numpy.testing.assert_allclose(y[y != 0], 1 / 0.7, rtol=1e-6)
    with autograd.record(train_mode=False):
        numpy.testing.assert_array_equal(drop(x).asnumpy(), x.asnumpy())
    np.random.seed(11)
    with autograd.record():
        again = drop(x).asnumpy()
    numpy.testing.assert_array_equal(again, y)


# ---- Training ----

def test_a_small_regression_converges():
    np.random.seed(0)
    r = numpy.random.default_rng(0)
    X = r.standard_normal((256, 4)).astype(numpy.float32)
    true_w = numpy.array([[2.0, -3.4, 1.5, 0.5]], dtype=numpy.float32)
    y = (X @ true_w.T + 4.2 + 0.01 * r.standard_normal((256, 1))).astype(numpy.float32)
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(X, y), batch_size=32, shuffle=True)
    net = nn.Sequential()
    net.add(nn.Dense(1))
    net.initialize(init.Normal(0.01))
    loss = gluon.loss.L2Loss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    numpy.random.seed(0)
    for _ in range(10):
        for xb, yb in loader:
            with autograd.record():
                l = loss(net(xb), yb)
            l.backward()
            trainer.step(xb.shape[0])
    final = float(loss(net(np.array(X)), np.array(y)).mean().item())
    assert final < 1e-3
    numpy.testing.assert_allclose(net[0].weight.data().asnumpy(), true_w, atol=0.02)


def test_a_small_classifier_converges_with_adam_and_dropout():
    np.random.seed(1)
    r = numpy.random.default_rng(1)
    centers = numpy.array([[3, 0], [-3, 0], [0, 3]], dtype=numpy.float32)
    labels = r.integers(0, 3, 300)
    X = (centers[labels] + 0.5 * r.standard_normal((300, 2))).astype(numpy.float32)
    net = nn.HybridSequential()
    net.add(nn.Dense(16, activation="relu"), nn.Dropout(0.1), nn.Dense(3))
    net.initialize(init.Xavier())
    net.hybridize()
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.05})
    Xa, ya = np.array(X), np.array(labels.astype(numpy.float32))
    for _ in range(60):
        with autograd.record():
            l = loss(net(Xa), ya)
        l.backward()
        trainer.step(300)
    assert float(loss(net(Xa), ya).mean().item()) < 0.1
    pred = net(Xa).asnumpy().argmax(axis=1)
    assert (pred == labels).mean() > 0.97


def test_same_seed_same_parameters_after_20_steps_on_every_engine():
    X = numpy.random.default_rng(3).standard_normal((32, 10)).astype(numpy.float32)
    y = numpy.random.default_rng(4).integers(0, 4, 32).astype(numpy.float32)

    def train(engine):
        with engine:
            np.random.seed(123)
            net = nn.Sequential()
            net.add(nn.Dense(16, activation="relu"), nn.Dropout(0.5), nn.Dense(4))
            net.initialize(init.Xavier())
            trainer = gluon.Trainer(net.collect_params(), "sgd",
                                    {"learning_rate": 0.1, "momentum": 0.9})
            loss = gluon.loss.SoftmaxCrossEntropyLoss()
            xa, ya = np.array(X), np.array(y)
            for _ in range(20):
                with autograd.record():
                    l = loss(net(xa), ya)
                l.backward()
                trainer.step(32)
            return [p.data().asnumpy() for p in net.collect_params().values()]

    ref = train(de.Engine("naive"))
    for threads in (1, 2, 4):
        for a, b in zip(ref, train(de.Engine("threaded", cpu_threads=threads))):
            numpy.testing.assert_array_equal(a, b)


def test_two_threads_train_two_networks_on_one_engine():
    import threading
    X = numpy.random.default_rng(6).standard_normal((64, 8)).astype(numpy.float32)
    y = numpy.random.default_rng(7).integers(0, 3, 64).astype(numpy.float32)

    def make():
        np.random.seed(77)
        net = nn.Sequential()
        net.add(nn.Dense(16, activation="relu", in_units=8), nn.Dense(3, in_units=16))
        net.initialize(init.Xavier())
        return net

    def train(net, out):
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
        loss = gluon.loss.SoftmaxCrossEntropyLoss()
        xa, ya = np.array(X), np.array(y)
        for _ in range(15):
            with autograd.record():
                l = loss(net(xa), ya)
            l.backward()
            trainer.step(64)
        out.append([p.data().asnumpy() for p in net.collect_params().values()])

    alone = []
    train(make(), alone)
    nets = [make(), make()]
    results = [[], []]
    threads = [threading.Thread(target=train, args=(n, r)) for n, r in zip(nets, results)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for r in results:
        assert len(r) == 1
        for a, b in zip(r[0], alone[0]):
            numpy.testing.assert_array_equal(a, b)


def test_arrays_dropped_while_their_backward_is_pending():
    net = nn.Sequential()
    net.add(nn.Dense(64, activation="relu"), nn.Dense(1))
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), "sgd")
    for _ in range(5):
        X = np.random.normal(size=(128, 32))
        with autograd.record():
            l = gluon.loss.L2Loss()(net(X), np.ones((128, 1)))
        l.backward()
        del X, l           # dropped while backward and update are still pending
        trainer.step(128)
    w = net[0].weight.data().asnumpy()
    assert numpy.isfinite(w).all()


def test_trainer_states_round_trip(tmp_path):
    def step(p, trainer, s):
        c = np.array(grads_for(s, (3, 4)))
        with autograd.record():
            l = (p.data() * c).sum()
        l.backward()
        trainer.step(1)

    def make():
        p = gluon.Parameter("w_weight", shape=(3, 4))
        p.initialize(init=init.Zero())
        p.set_data(np.array(W0))
        return p, gluon.Trainer([p], "adam", {"learning_rate": 0.01})

    p, t = make()
    for s in range(3):
        step(p, t, s)
    f = str(tmp_path / "adam.states")
    t.save_states(f)
    q, u = make()
    q.set_data(p.data())
    u.load_states(f)
    for s in range(3, 5):
        step(p, t, s)
        step(q, u, s)
    numpy.testing.assert_array_equal(p.data().asnumpy(), q.data().asnumpy())
    fresh_p, fresh = make()
    fresh_p.set_data(q.data())
    step(fresh_p, fresh, 5)   # without the states (t = 1, zero moments): another update
    step(q, u, 5)
    assert not numpy.array_equal(fresh_p.data().asnumpy(), q.data().asnumpy())


def test_training_on_a_simulated_gpu_matches_the_cpu():
    # Composed layers on the GPU (the fused ops are CPU-only), the fused updates' GPU path
    # and zero_grad's reset_arrays there. (relu's gradient uses a comparison, which the
    # frontend has on the CPU only, hence sigmoid.)
    from depengine import npx

    def run(ctx, engine):
        with engine:
            np.random.seed(3)
            net = nn.Sequential()
            net.add(nn.Dense(8, activation="sigmoid"), nn.Dense(3))
            net.initialize(init.Xavier(), ctx=ctx)
            trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
            X = np.array(numpy.random.default_rng(0).standard_normal((16, 5)), ctx=ctx)
            y = np.ones((16, 3), ctx=ctx)
            for _ in range(5):
                with autograd.record():
                    l = gluon.loss.L2Loss()(net(X), y)
                l.backward()
                trainer.step(16)
            assert net[0].weight.data().ctx == ctx
            net.collect_params().zero_grad()
            return ([p.data().asnumpy() for p in net.collect_params().values()]
                    + [p.grad().asnumpy() for p in net.collect_params().values()])

    # Not bitwise: on the CPU Dense is one fused op (sgemm with B transposed), on the device
    # dot of a transposed copy; OpenBLAS picks its kernel by CPU model, and on some models the
    # two call forms sum in another order (last-bit differences, ~3e-8 after 5 Adam steps).
    # A wrong GPU path (a missed update, a gradient not reset) is off by far more.
    cpu = run(npx.cpu(), de.Engine("threaded", cpu_threads=2))
    gpu = run(npx.gpu(0), de.Engine("threaded", cpu_threads=2, sim_gpus=1))
    for a, b in zip(cpu, gpu):
        numpy.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert not cpu[-1].any() and not gpu[-1].any()
