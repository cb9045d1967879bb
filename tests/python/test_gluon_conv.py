"""gluon.nn's convolutional layers (Conv2D, MaxPool2D, AvgPool2D, GlobalMaxPool2D,
GlobalAvgPool2D, BatchNorm): shapes, forward against direct-loop NumPy references in float64,
gradients against finite differences, BatchNorm's modes and running statistics against
MXNet's formulas, hybridized equal to eager, save / load, the errors, a small CNN that
converges, and one step of issue 25's network."""
import re

import numpy
import pytest

import depengine as de
from depengine import autograd, gluon, init, np, npx
from depengine.gluon import nn

RNG = numpy.random.default_rng(2025)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(numpy.float32)


def f64(a):
    return a.asnumpy().astype(numpy.float64)


# ---- Direct-loop references (float64) ----

def conv_ref(x, w, b, stride, pad):
    n, c, h, wd = x.shape
    k, _, kh, kw = w.shape
    xp = numpy.zeros((n, c, h + 2 * pad[0], wd + 2 * pad[1]))
    xp[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + wd] = x
    oh = (h + 2 * pad[0] - kh) // stride[0] + 1
    ow = (wd + 2 * pad[1] - kw) // stride[1] + 1
    y = numpy.zeros((n, k, oh, ow))
    for ni in range(n):
        for ki in range(k):
            for i in range(oh):
                for j in range(ow):
                    r, s = i * stride[0], j * stride[1]
                    acc = 0.0 if b is None else float(b[ki])
                    for ci in range(c):
                        for u in range(kh):
                            for v in range(kw):
                                acc += xp[ni, ci, r + u, s + v] * w[ki, ci, u, v]
                    y[ni, ki, i, j] = acc
    return y


def pool_ref(x, kernel, stride, pad, kind, count_include_pad=True):
    n, c, h, w = x.shape
    oh = (h + 2 * pad[0] - kernel[0]) // stride[0] + 1
    ow = (w + 2 * pad[1] - kernel[1]) // stride[1] + 1
    y = numpy.zeros((n, c, oh, ow))
    for ni in range(n):
        for ci in range(c):
            for i in range(oh):
                for j in range(ow):
                    vals = []
                    for u in range(kernel[0]):
                        for v in range(kernel[1]):
                            r, s = i * stride[0] - pad[0] + u, j * stride[1] - pad[1] + v
                            if 0 <= r < h and 0 <= s < w:
                                vals.append(x[ni, ci, r, s])
                    if kind == "max":
                        y[ni, ci, i, j] = max(vals)
                    else:
                        area = kernel[0] * kernel[1] if count_include_pad else len(vals)
                        y[ni, ci, i, j] = sum(vals) / area
    return y


def bn_ref(x, gamma, beta, eps):
    """Training-mode batch norm over axis 1: output, batch mean, biased batch variance."""
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean = x.mean(axis=axes)
    var = ((x - mean.reshape(shape)) ** 2).mean(axis=axes)
    y = (x - mean.reshape(shape)) / numpy.sqrt(var.reshape(shape) + eps)
    return y * gamma.reshape(shape) + beta.reshape(shape), mean, var


def bn_infer_ref(x, gamma, beta, mean, var, eps):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(shape)) / numpy.sqrt(var.reshape(shape) + eps)
    return y * gamma.reshape(shape) + beta.reshape(shape)


def numeric_grad(f, x, r, h=1e-4):
    """d/dx of sum(r * f(x)) by central differences, in float64."""
    x = x.astype(numpy.float64)
    g = numpy.zeros_like(x)
    for i in numpy.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        g[i] = ((f(up) - f(down)) * r).sum() / (2 * h)
    return g


# ---- Shapes ----

@pytest.mark.parametrize("kernel,strides,padding,out_hw", [
    (3, 1, 0, (6, 5)), ((3, 2), (2, 1), (1, 0), (4, 6)), ((1, 1), 2, 0, (4, 4)),
    (5, (1, 2), (2, 1), (8, 3))])
def test_conv2d_output_shape_and_inferred_in_channels(kernel, strides, padding, out_hw):
    conv = nn.Conv2D(4, kernel, strides=strides, padding=padding)
    conv.initialize()
    y = conv(np.zeros((2, 3, 8, 7)))
    assert y.shape == (2, 4) + out_hw
    k = (kernel, kernel) if isinstance(kernel, int) else kernel
    assert conv.weight.shape == (4, 3) + k
    assert conv.bias.shape == (4,)
    assert conv.name.startswith("conv")
    assert conv.weight.name == conv.prefix + "weight"


def test_pooling_and_batch_norm_shapes():
    x = np.zeros((2, 3, 7, 6))
    assert nn.MaxPool2D()(x).shape == (2, 3, 3, 3)
    assert nn.MaxPool2D(3, strides=2, padding=1)(x).shape == (2, 3, 4, 3)
    assert nn.AvgPool2D((2, 3), strides=(1, 3))(x).shape == (2, 3, 6, 2)
    assert nn.GlobalAvgPool2D()(x).shape == (2, 3, 1, 1)
    assert nn.GlobalMaxPool2D()(x).shape == (2, 3, 1, 1)
    for shape in ((5, 3), (2, 3, 7, 6), (2, 3, 4)):
        bn = nn.BatchNorm()
        bn.initialize()
        assert bn(np.zeros(shape)).shape == shape
        assert bn.running_var.shape == (3,)


def test_repr_and_parameters_as_mxnet():
    conv = nn.Conv2D(8, 3, padding=1, activation="relu", use_bias=False, in_channels=2)
    assert repr(conv) == ("Conv2D(2 -> 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), "
                          "bias=False, Activation(relu))")
    assert conv.bias is None
    assert repr(nn.MaxPool2D()) == ("MaxPool2D(size=(2, 2), stride=(2, 2), padding=(0, 0), "
                                    "ceil_mode=False, global_pool=False, pool_type=max, "
                                    "layout=NCHW)")
    bn = nn.BatchNorm()
    assert repr(bn) == ("BatchNorm(axis=1, eps=1e-05, momentum=0.9, fix_gamma=False, "
                        "use_global_stats=False, in_channels=None)")
    names = [k[len(bn.prefix):] for k in bn.collect_params().keys()]
    assert names == ["gamma", "beta", "running_mean", "running_var"]
    assert bn.running_mean.grad_req == "null" and bn.running_var.grad_req == "null"
    assert bn.gamma.grad_req == "write" and bn.beta.grad_req == "write"
    fixed = nn.BatchNorm(center=False, scale=False)
    assert fixed.gamma.grad_req == "null" and fixed.beta.grad_req == "null"


# ---- Forward against the references ----

@pytest.mark.parametrize("strides,padding,use_bias", [
    ((1, 1), (0, 0), True), ((2, 1), (1, 2), True), (2, 1, False)])
def test_conv2d_forward_matches_direct_loops(strides, padding, use_bias):
    x, w, b = rand(2, 3, 6, 5), rand(4, 3, 3, 2), rand(4)
    conv = nn.Conv2D(4, (3, 2), strides=strides, padding=padding, use_bias=use_bias,
                     in_channels=3)
    conv.initialize()
    conv.weight.set_data(np.array(w))
    if use_bias:
        conv.bias.set_data(np.array(b))
    s = strides if isinstance(strides, tuple) else (strides, strides)
    p = padding if isinstance(padding, tuple) else (padding, padding)
    ref = conv_ref(x.astype(numpy.float64), w, b if use_bias else None, s, p)
    numpy.testing.assert_allclose(f64(conv(np.array(x))), ref, rtol=1e-4, atol=1e-4)


def test_conv2d_activation_and_initializers():
    x = numpy.random.default_rng(3).standard_normal((2, 2, 5, 5)).astype(numpy.float32)
    conv = nn.Conv2D(3, 3, activation="relu", weight_initializer=init.Constant(0.5),
                     bias_initializer=init.Constant(-1.0))
    conv.initialize()
    ref = numpy.maximum(conv_ref(x.astype(numpy.float64), numpy.full((3, 2, 3, 3), 0.5),
                                 numpy.full(3, -1.0), (1, 1), (0, 0)), 0.0)
    numpy.testing.assert_allclose(f64(conv(np.array(x))), ref, rtol=1e-4, atol=1e-4)
    assert (ref == 0).any() and (ref > 0).any()


@pytest.mark.parametrize("make,ref", [
    (lambda: nn.MaxPool2D(), lambda x: pool_ref(x, (2, 2), (2, 2), (0, 0), "max")),
    (lambda: nn.MaxPool2D(3, strides=(2, 1), padding=1),
     lambda x: pool_ref(x, (3, 3), (2, 1), (1, 1), "max")),
    (lambda: nn.AvgPool2D((3, 2), strides=1, padding=(1, 1)),
     lambda x: pool_ref(x, (3, 2), (1, 1), (1, 1), "avg")),
    (lambda: nn.AvgPool2D(3, strides=2, padding=1, count_include_pad=False),
     lambda x: pool_ref(x, (3, 3), (2, 2), (1, 1), "avg", count_include_pad=False)),
    (lambda: nn.GlobalAvgPool2D(), lambda x: x.mean(axis=(2, 3), keepdims=True)),
    (lambda: nn.GlobalMaxPool2D(), lambda x: x.max(axis=(2, 3), keepdims=True)),
])
def test_pooling_forward_matches_direct_loops(make, ref):
    x = rand(2, 3, 7, 6)
    numpy.testing.assert_allclose(f64(make()(np.array(x))), ref(x.astype(numpy.float64)),
                                  rtol=1e-5, atol=1e-5)


# ---- Gradients against finite differences ----

@pytest.mark.parametrize("strides,padding", [((1, 1), (0, 0)), ((2, 2), (1, 1)),
                                             ((2, 1), (0, 2))])
def test_conv2d_gradients_match_finite_differences(strides, padding):
    x, w, b = rand(2, 2, 5, 6), rand(3, 2, 3, 3), rand(3)
    conv = nn.Conv2D(3, 3, strides=strides, padding=padding, in_channels=2)
    conv.initialize()
    xa = np.array(x)
    xa.attach_grad()
    conv.weight.set_data(np.array(w))
    conv.bias.set_data(np.array(b))
    with autograd.record():
        y = conv(xa)
    r = rand(*y.shape)
    y.backward(np.array(r))
    args = [x, w, b]
    for i, got in enumerate((xa.grad, conv.weight.grad(), conv.bias.grad())):
        def f(v, i=i):
            a = [v if j == i else args[j].astype(numpy.float64) for j in range(3)]
            return conv_ref(*a, strides, padding)
        numpy.testing.assert_allclose(got.asnumpy(), numeric_grad(f, args[i], r),
                                      rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("strides,padding", [((1, 1), (0, 0)), ((2, 1), (1, 2))])
def test_conv2d_relu_gradients_match_finite_differences(strides, padding):
    # The fused layer (npx.convolution_relu) against max(conv, 0) in float64, on a fixed
    # draw whose outputs all lie at least 0.01 from ReLU's kink, so no finite step crosses it.
    g = numpy.random.default_rng(11)
    x, w, b = (g.standard_normal(s).astype(numpy.float32) for s in ((2, 2, 5, 6), (3, 2, 3, 3), (3,)))
    assert numpy.abs(conv_ref(x, w, b, strides, padding)).min() > 0.01
    conv = nn.Conv2D(3, 3, strides=strides, padding=padding, in_channels=2,
                     activation="relu")
    conv.initialize()
    xa = np.array(x)
    xa.attach_grad()
    conv.weight.set_data(np.array(w))
    conv.bias.set_data(np.array(b))
    with autograd.record():
        y = conv(xa)
    r = g.standard_normal(y.shape).astype(numpy.float32)
    y.backward(np.array(r))
    args = [x, w, b]
    for i, got in enumerate((xa.grad, conv.weight.grad(), conv.bias.grad())):
        def f(v, i=i):
            a = [v if j == i else args[j].astype(numpy.float64) for j in range(3)]
            return numpy.maximum(conv_ref(*a, strides, padding), 0.0)
        numpy.testing.assert_allclose(got.asnumpy(), numeric_grad(f, args[i], r),
                                      rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("make,ref", [
    (lambda: nn.MaxPool2D(3, strides=2, padding=1),
     lambda x: pool_ref(x, (3, 3), (2, 2), (1, 1), "max")),
    (lambda: nn.AvgPool2D(3, strides=2, padding=1),
     lambda x: pool_ref(x, (3, 3), (2, 2), (1, 1), "avg")),
    (lambda: nn.AvgPool2D(2, strides=1, padding=1, count_include_pad=False),
     lambda x: pool_ref(x, (2, 2), (1, 1), (1, 1), "avg", count_include_pad=False)),
    (lambda: nn.GlobalAvgPool2D(), lambda x: x.mean(axis=(2, 3), keepdims=True)),
])
def test_pooling_gradients_match_finite_differences(make, ref):
    # Distinct values a finite step cannot reorder, so each window's maximum is unique.
    x = (RNG.permutation(2 * 2 * 5 * 6).reshape(2, 2, 5, 6) * 0.01).astype(numpy.float32)
    xa = np.array(x)
    xa.attach_grad()
    with autograd.record():
        y = make()(xa)
    r = rand(*y.shape)
    y.backward(np.array(r))
    numpy.testing.assert_allclose(xa.grad.asnumpy(), numeric_grad(ref, x, r, h=1e-3),
                                  rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("shape", [(6, 3), (2, 3, 4, 3)])
def test_batch_norm_gradients_match_finite_differences(shape):
    x, gamma, beta = rand(*shape), rand(3), rand(3)
    bn = nn.BatchNorm(in_channels=3)
    bn.initialize()
    bn.gamma.set_data(np.array(gamma))
    bn.beta.set_data(np.array(beta))
    xa = np.array(x)
    xa.attach_grad()
    with autograd.record():
        y = bn(xa)
    r = rand(*y.shape)
    y.backward(np.array(r))
    args = [x, gamma, beta]
    for i, got in enumerate((xa.grad, bn.gamma.grad(), bn.beta.grad())):
        def f(v, i=i):
            a = [v if j == i else args[j].astype(numpy.float64) for j in range(3)]
            return bn_ref(*a, 1e-5)[0]
        numpy.testing.assert_allclose(got.asnumpy(), numeric_grad(f, args[i], r),
                                      rtol=2e-3, atol=2e-3)


# ---- BatchNorm's modes and running statistics ----

def test_batch_norm_running_statistics_follow_mxnet_over_steps():
    momentum, eps = 0.8, 1e-3
    bn = nn.BatchNorm(momentum=momentum, epsilon=eps, in_channels=4)
    bn.initialize()
    gamma, beta = rand(4), rand(4)
    bn.gamma.set_data(np.array(gamma))
    bn.beta.set_data(np.array(beta))
    rm, rv = numpy.zeros(4), numpy.ones(4)
    for step in range(4):
        x = rand(5, 4, 3, 3, scale=2.0) + step
        with autograd.record():
            y = bn(np.array(x))
        ref, mean, var = bn_ref(x.astype(numpy.float64), gamma, beta, eps)
        numpy.testing.assert_allclose(f64(y), ref, rtol=1e-4, atol=1e-4)
        rm = momentum * rm + (1 - momentum) * mean
        rv = momentum * rv + (1 - momentum) * var
        numpy.testing.assert_allclose(f64(bn.running_mean.data()), rm, rtol=1e-5, atol=1e-5)
        numpy.testing.assert_allclose(f64(bn.running_var.data()), rv, rtol=1e-5, atol=1e-5)
    # Predict mode (outside record) normalizes with the running statistics and leaves them.
    x = rand(3, 4, 2, 2)
    numpy.testing.assert_allclose(f64(bn(np.array(x))),
                                  bn_infer_ref(x.astype(numpy.float64), gamma, beta, rm, rv, eps),
                                  rtol=1e-4, atol=1e-4)
    with autograd.record(train_mode=False):
        y = bn(np.array(x))
    numpy.testing.assert_allclose(f64(y), bn_infer_ref(x.astype(numpy.float64), gamma, beta,
                                                       rm, rv, eps), rtol=1e-4, atol=1e-4)
    numpy.testing.assert_allclose(f64(bn.running_mean.data()), rm, rtol=1e-5, atol=1e-5)
    # train_mode() without recording is training mode too, as MXNet's is_train.
    with autograd.train_mode():
        bn(np.array(x))
    _, mean, _ = bn_ref(x.astype(numpy.float64), gamma, beta, eps)
    numpy.testing.assert_allclose(f64(bn.running_mean.data()),
                                  momentum * rm + (1 - momentum) * mean, rtol=1e-5, atol=1e-5)


def test_batch_norm_use_global_stats_scale_and_center():
    x = rand(6, 3)
    rm, rv = rand(3), numpy.abs(rand(3)) + 0.5
    bn = nn.BatchNorm(use_global_stats=True, in_channels=3,
                      running_mean_initializer=init.Constant(0.0))
    bn.initialize()
    bn.running_mean.set_data(np.array(rm))
    bn.running_var.set_data(np.array(rv))
    with autograd.record():
        y = bn(np.array(x))
    numpy.testing.assert_allclose(f64(y), bn_infer_ref(x.astype(numpy.float64), numpy.ones(3),
                                                       numpy.zeros(3), rm, rv, 1e-5),
                                  rtol=1e-4, atol=1e-4)
    numpy.testing.assert_array_equal(bn.running_mean.data().asnumpy(), rm)

    # scale=False: gamma taken as 1 whatever its value, and no gradient for it.
    plain = nn.BatchNorm(scale=False, center=False, gamma_initializer=init.Constant(3.0),
                         beta_initializer=init.Constant(0.5))
    plain.initialize()
    xa = np.array(x)
    xa.attach_grad()
    with autograd.record():
        y = plain(xa)
    y.backward()
    ref, _, _ = bn_ref(x.astype(numpy.float64), numpy.ones(3), numpy.full(3, 0.5), 1e-5)
    numpy.testing.assert_allclose(f64(y), ref, rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match="grad_req='null'"):
        plain.gamma.grad()
    with pytest.raises(RuntimeError, match="grad_req='null'"):
        plain.beta.grad()


def test_trainer_leaves_running_statistics_alone():
    net = nn.HybridSequential()
    net.add(nn.Dense(4), nn.BatchNorm(), nn.Dense(2))
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "wd": 0.5})
    x = np.array(rand(8, 3))
    with autograd.record():
        l = net(x).sum()
    l.backward()
    before = net[1].running_var.data().asnumpy().copy()
    trainer.step(8)
    numpy.testing.assert_array_equal(net[1].running_var.data().asnumpy(), before)


# ---- Conv2D(activation='relu'): the fused npx.convolution_relu ----

ENGINES = [("naive", 0), ("threaded", 1), ("threaded", 2), ("threaded", 4)]


def engine_of(kind):
    name, workers = kind
    return de.Engine(name, cpu_threads=workers) if workers else de.Engine(name)


def conv_relu_steps(fused, strides, hybrid):
    """The output and the gradients of x, weight and bias over two steps (the second a replay
    when hybridized) of Conv2D(5, 3, padding=1, activation='relu') (fused) or of
    Conv2D(5, 3, padding=1) then Activation('relu'), from the same parameters and head
    gradient. Stride 1 takes the direct convolution loop, stride 2 im2col + GEMM."""
    r = numpy.random.default_rng(51)
    x = np.array(r.standard_normal((2, 3, 10, 12)).astype(numpy.float32))
    x.attach_grad()
    net = nn.HybridSequential()
    if fused:
        net.add(nn.Conv2D(5, 3, strides=strides, padding=1, activation="relu"))
    else:
        net.add(nn.Conv2D(5, 3, strides=strides, padding=1), nn.Activation("relu"))
    net.initialize()
    conv = net[0]
    conv.weight.set_data(np.array(r.standard_normal((5, 3, 3, 3)).astype(numpy.float32)))
    conv.bias.set_data(np.array(r.standard_normal(5).astype(numpy.float32)))
    if hybrid:
        net.hybridize()
    out = []
    for _ in range(2):
        with autograd.record():
            y = net(x)
        y.backward(np.array(r.standard_normal(y.shape).astype(numpy.float32)))
        out += [y.asnumpy(), x.grad.asnumpy(), conv.weight.grad().asnumpy(),
                conv.bias.grad().asnumpy()]
    assert (out[0] == 0).any() and (out[0] > 0).any()  # the ReLU cuts and passes
    return out


@pytest.mark.parametrize("hybrid", [False, True], ids=["eager", "hybridized"])
@pytest.mark.parametrize("strides", [1, 2])
def test_conv2d_fused_relu_is_relu_of_convolution_bit_for_bit(strides, hybrid):
    # As the C++ CnnAutograd.ConvolutionReluIsReluOfConvolutionBitForBit: forward and every
    # gradient, on the naive engine and the threaded one with 1, 2 and 4 workers.
    runs = []
    for kind in ENGINES:
        with engine_of(kind):
            fused = conv_relu_steps(True, strides, hybrid)
            composed = conv_relu_steps(False, strides, hybrid)
        for a, b in zip(fused, composed):
            numpy.testing.assert_array_equal(a, b)
        runs.append(fused)
    for run in runs[1:]:
        for a, b in zip(run, runs[0]):
            numpy.testing.assert_array_equal(a, b)


def test_conv2d_relu_pushes_one_fused_op():
    r = numpy.random.default_rng(52)
    x = np.array(r.standard_normal((2, 3, 6, 6)).astype(numpy.float32))
    names = {}
    for act in ("relu", "tanh"):
        conv = nn.Conv2D(4, 3, activation=act, in_channels=3)
        conv.initialize()
        e = de.engine()
        with de.record(e) as rec:
            with autograd.record():
                y = conv(x)
            y.backward()
        e.wait_all()
        names[act] = rec.graph().node_names()
    assert "convolution_relu" in names["relu"]
    assert "convolution" not in names["relu"] and "relu" not in names["relu"]
    assert "convolution" in names["tanh"] and "convolution_relu" not in names["tanh"]


def test_npx_convolution_relu_and_its_errors():
    r = numpy.random.default_rng(53)
    x = np.array(r.standard_normal((2, 3, 7, 7)).astype(numpy.float32))
    w = np.array(r.standard_normal((4, 3, 3, 3)).astype(numpy.float32))
    b = np.array(r.standard_normal(4).astype(numpy.float32))
    for args in ({"stride": (2, 2), "pad": (1, 1)}, {"no_bias": True}):
        got = npx.convolution_relu(x, w, b, kernel=(3, 3), num_filter=4, **args)
        want = npx.relu(npx.convolution(x, w, b, kernel=(3, 3), num_filter=4, **args))
        numpy.testing.assert_array_equal(got.asnumpy(), want.asnumpy())
    with pytest.raises(ValueError, match=r"convolution_relu: bias of shape \(3,\) does not "
                                         r"match weight \(4, 3, 3, 3\)"):
        npx.convolution_relu(x, w, np.zeros(3))
    with pytest.raises(ValueError, match=r"convolution_relu: kernel \(2, 2\) does not match "
                                         r"weight \(4, 3, 3, 3\)"):
        npx.convolution_relu(x, w, b, kernel=(2, 2))


# ---- hybridize() ----

def small_cnn(seed, ctx=None, act="relu"):
    np.random.seed(seed)
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, padding=1), nn.BatchNorm(), nn.Activation(act),
            nn.MaxPool2D(), nn.Conv2D(6, 2, strides=2, activation=act), nn.BatchNorm(),
            nn.GlobalAvgPool2D(), nn.Flatten(), nn.Dense(3))
    net.initialize(init.Xavier(), ctx=ctx)
    return net


def test_hybridized_equals_eager_outputs_gradients_and_running_stats():
    xs = [np.array(rand(4, 2, 8, 8)) for _ in range(4)]
    labels = np.array(numpy.array([0, 1, 2, 1], dtype=numpy.float32))
    runs = []
    for hybrid in (False, True):
        net = small_cnn(7)
        if hybrid:
            net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05})
        loss = gluon.loss.SoftmaxCrossEntropyLoss()
        seen = []
        for x in xs:
            with autograd.record():
                l = loss(net(x), labels)
            l.backward()
            seen += [l.asnumpy()] + [p.grad().asnumpy() for p in net.collect_params().values()
                                     if p.grad_req != "null"]
            trainer.step(4)
            # Predict mode (a replay when hybridized) reads the updated statistics.
            seen.append(net(x).asnumpy())
            # Training mode outside record: the replayed segment updates them in place again.
            with autograd.train_mode():
                seen.append(net(x).asnumpy())
            seen += [p.data().asnumpy() for p in net.collect_params().values()]
        runs.append(seen)
    assert len(runs[0]) == len(runs[1])
    for a, b in zip(*runs):
        numpy.testing.assert_array_equal(a, b)


def test_hybridized_batch_norm_replay_updates_running_stats_each_call():
    bn = nn.BatchNorm(momentum=0.5, in_channels=2)
    bn.initialize()
    bn.hybridize()
    x = rand(4, 2, 3, 3)
    rm = numpy.zeros(2)
    for _ in range(3):
        with autograd.train_mode():
            bn(np.array(x))
        rm = 0.5 * rm + 0.5 * x.astype(numpy.float64).mean(axis=(0, 2, 3))
        numpy.testing.assert_allclose(f64(bn.running_mean.data()), rm, rtol=1e-5, atol=1e-6)


def test_on_a_simulated_gpu_as_on_the_cpu():
    # tanh: relu's gradient (a compare op) has no GPU kernel yet.
    x = rand(4, 2, 8, 8)
    runs = []
    for engine, ctx in ((de.Engine("threaded"), npx.cpu()),
                        (de.Engine("threaded", sim_gpus=1), npx.gpu(0))):
        with engine:
            net = small_cnn(9, ctx, act="tanh")
            net.hybridize()
            xa = np.array(x, ctx=ctx)
            with autograd.record():
                l = net(xa).sum()
            l.backward()
            runs.append([net(xa).asnumpy(), net[1].running_mean.data().asnumpy()]
                        + [p.grad().asnumpy() for p in net.collect_params().values()
                           if p.grad_req != "null"])
            assert net[0].weight.data().ctx == ctx
    for a, b in zip(*runs):
        numpy.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"conv\d+: convolution: the arrays are on different "
                                         r"devices"):
        with de.Engine("threaded", sim_gpus=1):
            small_cnn(9)(np.array(x, ctx=npx.gpu(0)))


# ---- save / load ----

def test_save_load_round_trip_with_conv_and_batch_norm(tmp_path):
    net = small_cnn(3)
    x = np.array(rand(4, 2, 8, 8))
    for _ in range(2):
        with autograd.record():
            net(x)
    path = str(tmp_path / "cnn.params")
    net.save_parameters(path)
    with numpy.load(path) as f:
        assert {"0.weight", "0.bias", "1.gamma", "1.beta", "1.running_mean",
                "1.running_var"} <= set(f.files)
    other = small_cnn(4)
    other.load_parameters(path)
    for a, b in zip(net.collect_params().values(), other.collect_params().values()):
        numpy.testing.assert_array_equal(a.data().asnumpy(), b.data().asnumpy())
    numpy.testing.assert_array_equal(net(x).asnumpy(), other(x).asnumpy())
    other.hybridize()
    numpy.testing.assert_array_equal(net(x).asnumpy(), other(x).asnumpy())
    wrong = nn.HybridSequential()
    wrong.add(nn.Conv2D(5, 3, padding=1, in_channels=2))
    with pytest.raises(ValueError, match=r"0\.weight .* has shape \(5, 2, 3, 3\)"):
        wrong.load_parameters(path, ignore_extra=True)


# ---- Errors ----

def test_errors_name_the_layer_and_both_shapes():
    conv = nn.Conv2D(8, 5, prefix="c1_")
    conv.initialize()
    with pytest.raises(ValueError, match=r"c1: kernel \(5, 5\) is larger than the padded input: "
                                         r"input of shape \(2, 3, 4, 4\) with padding \(0, 0\) "
                                         r"is \(4, 4\)"):
        conv(np.zeros((2, 3, 4, 4)))
    # The failed call did not fix the layer's in_channels: another count still fits.
    assert conv.weight.shape == (8, 0, 5, 5)
    assert conv(np.zeros((1, 2, 5, 5))).shape == (1, 8, 1, 1)
    fixed = nn.Conv2D(8, 3, in_channels=1, prefix="c2_")
    fixed.initialize()
    with pytest.raises(ValueError, match=r"c2: an input of shape \(2, 3, 4, 4\) has 3 channels, "
                                         r"but the weight has shape \(8, 1, 3, 3\)"):
        fixed(np.zeros((2, 3, 4, 4)))
    # A channel count seen once (inferred) is the layer's from then on.
    inferred = nn.Conv2D(8, 3, prefix="c3_")
    inferred.initialize()
    inferred(np.zeros((1, 2, 4, 4)))
    with pytest.raises(ValueError, match=r"c3: an input of shape \(1, 4, 4, 4\) has 4 channels, "
                                         r"but the weight has shape \(8, 2, 3, 3\)"):
        inferred(np.zeros((1, 4, 4, 4)))
    for shape in ((2, 3, 4), (1, 2, 3, 4, 4)):
        with pytest.raises(ValueError, match=r"c3: Conv2D expects a 4-d input \(N, C, H, W\), "
                                             r"got shape " + re.escape(str(shape))):
            inferred(np.zeros(shape))
    with pytest.raises(ValueError, match=r"p1: pool_size \(3, 3\) is larger than the padded "
                                         r"input: input of shape \(1, 1, 2, 5\)"):
        nn.MaxPool2D(3, prefix="p1_")(np.zeros((1, 1, 2, 5)))
    with pytest.raises(ValueError, match=r"p2: MaxPool2D expects a 4-d input"):
        nn.MaxPool2D(prefix="p2_")(np.zeros((4, 4)))
    with pytest.raises(ValueError, match=r"p3: pooling: "):
        nn.AvgPool2D(2, padding=2, prefix="p3_")(np.zeros((1, 1, 4, 4)))
    bn = nn.BatchNorm(in_channels=3, prefix="bn1_")
    bn.initialize()
    with pytest.raises(ValueError, match=r"bn1: an input of shape \(2, 4, 5, 5\) has 4 channels, "
                                         r"but gamma, beta and the running statistics have "
                                         r"shape \(3,\)"):
        bn(np.zeros((2, 4, 5, 5)))
    with pytest.raises(ValueError, match=r"bn1: BatchNorm expects an input \(N, C, \.\.\.\)"):
        bn(np.zeros(3))


def test_unsupported_options_are_errors_naming_them():
    with pytest.raises(NotImplementedError, match="Conv2D: layout 'NHWC' is not supported"):
        nn.Conv2D(8, 3, layout="NHWC")
    with pytest.raises(NotImplementedError, match=r"Conv2D: dilation \(2, 2\) is not supported"):
        nn.Conv2D(8, 3, dilation=(2, 2))
    with pytest.raises(NotImplementedError, match="Conv2D: groups=2 is not supported"):
        nn.Conv2D(8, 3, groups=2)
    with pytest.raises(ValueError, match="Conv2D: kernel_size must be an int or a pair"):
        nn.Conv2D(8, (3, 3, 3))
    numpy_ints = nn.Conv2D(numpy.int64(2), [numpy.int32(3), 2], strides=numpy.int64(2))
    numpy_ints.initialize()
    assert numpy_ints(np.zeros((1, 1, 7, 6))).shape == (1, 2, 3, 3)
    with pytest.raises(ValueError, match="Conv2D: kernel_size must be an int or a pair"):
        nn.Conv2D(8, (3, 2.5))
    with pytest.raises(ValueError, match="Conv2D: strides must be an int or a pair"):
        nn.Conv2D(8, 3, strides=True)
    with pytest.raises(ValueError, match="Conv2D: padding must be at least 0"):
        nn.Conv2D(8, 3, padding=-1)
    with pytest.raises(ValueError, match="Conv2D: strides must be at least 1"):
        nn.Conv2D(8, 3, strides=(1, 0))
    with pytest.raises(NotImplementedError, match="MaxPool2D: ceil_mode=True"):
        nn.MaxPool2D(ceil_mode=True)
    with pytest.raises(NotImplementedError, match="AvgPool2D: layout 'NHWC'"):
        nn.AvgPool2D(layout="NHWC")
    with pytest.raises(NotImplementedError, match="GlobalMaxPool2D: layout 'NHWC'"):
        nn.GlobalMaxPool2D(layout="NHWC")
    with pytest.raises(NotImplementedError, match="BatchNorm: axis=3 is not supported"):
        nn.BatchNorm(axis=3)
    bn = nn.BatchNorm(axis=-1)
    bn.initialize()
    assert bn(np.zeros((4, 3))).shape == (4, 3)
    with pytest.raises(NotImplementedError, match=r"axis=-1 of a 4-d input"):
        bn(np.zeros((4, 3, 2, 2)))


# ---- Training ----

def bars(n, seed):
    """8x8 images of a vertical (class 0) or horizontal (class 1) bar at a random place, in
    noise."""
    r = numpy.random.default_rng(seed)
    x = r.standard_normal((n, 1, 8, 8)).astype(numpy.float32) * 0.3
    y = r.integers(0, 2, n)
    pos = r.integers(1, 7, n)
    for i in range(n):
        if y[i] == 0:
            x[i, 0, :, pos[i]] += 1.5
        else:
            x[i, 0, pos[i], :] += 1.5
    return x, y.astype(numpy.float32)


@pytest.mark.parametrize("hybrid", [False, True])
def test_a_small_cnn_converges(hybrid):
    np.random.seed(11)
    net = nn.HybridSequential()
    net.add(nn.Conv2D(6, 3, padding=1, activation="relu"), nn.BatchNorm(), nn.MaxPool2D(),
            nn.Conv2D(8, 3, activation="relu"), nn.GlobalMaxPool2D(), nn.Flatten(), nn.Dense(2))
    net.initialize(init.Xavier())
    if hybrid:
        net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    x, y = bars(256, 1)
    losses = []
    for epoch in range(3):
        for i in range(0, 256, 32):
            with autograd.record():
                l = loss(net(np.array(x[i:i + 32])), np.array(y[i:i + 32]))
            l.backward()
            trainer.step(32)
            losses.append(float(l.mean().item()))
    assert numpy.mean(losses[-4:]) < 0.25 * numpy.mean(losses[:4])
    xt, yt = bars(128, 2)
    pred = net(np.array(xt)).asnumpy().argmax(axis=1)
    assert (pred == yt).mean() >= 0.95


def issue25_net():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(32, 3, activation="relu"), nn.Conv2D(64, 3, activation="relu"),
            nn.MaxPool2D(2), nn.Dropout(0.25), nn.Flatten(), nn.Dense(128, activation="relu"),
            nn.Dropout(0.5), nn.Dense(10))
    return net


def test_issue25_network_one_step_eager_and_hybridized():
    r = numpy.random.default_rng(5)
    x = np.array(r.random((8, 1, 28, 28)).astype(numpy.float32))
    y = np.array(r.integers(0, 10, 8).astype(numpy.float32))
    results = []
    for hybrid in (False, True):
        np.random.seed(21)
        net = issue25_net()
        net.initialize(init.Xavier())
        if hybrid:
            net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "adadelta", {"learning_rate": 1.0})
        loss = gluon.loss.SoftmaxCrossEntropyLoss()
        with autograd.record():
            l = loss(net(x), y)
        l.backward()
        trainer.step(8)
        assert net[4](net[3](net[2](net[1](net[0](x))))).shape == (8, 9216)
        assert net[0].weight.shape == (32, 1, 3, 3) and net[1].weight.shape == (64, 32, 3, 3)
        assert net[5].weight.shape == (128, 9216)
        results.append([l.asnumpy(), net(x).asnumpy()]
                       + [p.data().asnumpy() for p in net.collect_params().values()])
    for a, b in zip(*results):
        numpy.testing.assert_array_equal(a, b)
    assert numpy.isfinite(results[0][0]).all()
