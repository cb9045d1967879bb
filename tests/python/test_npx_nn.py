"""depengine.npx's CNN operators (convolution, pooling, softmax, log_softmax, batch_norm)
against NumPy references, with MXNet 1.9's keywords, and their errors."""
import numpy
import pytest

from depengine import autograd, np, npx

RNG = numpy.random.default_rng(25)


def rand(*shape):
    return RNG.standard_normal(shape).astype(numpy.float32)


def close(a, b, tol=1e-5):
    numpy.testing.assert_allclose(a.asnumpy(), b, rtol=tol, atol=tol)


def conv_ref(x, w, b, stride, pad):
    n, c, h, wd = x.shape
    k, _, kh, kw = w.shape
    xp = numpy.pad(x.astype(numpy.float64), ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    oh = (h + 2 * pad[0] - kh) // stride[0] + 1
    ow = (wd + 2 * pad[1] - kw) // stride[1] + 1
    y = numpy.zeros((n, k, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * stride[0]:i * stride[0] + kh, j * stride[1]:j * stride[1] + kw]
            y[:, :, i, j] = numpy.einsum("nchw,kchw->nk", win, w)
    if b is not None:
        y += b.reshape(1, k, 1, 1)
    return y


def pool_ref(x, kernel, stride, pad, kind, count_include_pad=True):
    n, c, h, w = x.shape
    fill = -numpy.inf if kind == "max" else 0.0
    xp = numpy.pad(x.astype(numpy.float64), ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])),
                   constant_values=fill)
    inside = numpy.pad(numpy.ones((h, w)), ((pad[0], pad[0]), (pad[1], pad[1])))
    oh = (h + 2 * pad[0] - kernel[0]) // stride[0] + 1
    ow = (w + 2 * pad[1] - kernel[1]) // stride[1] + 1
    y = numpy.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            rows = slice(i * stride[0], i * stride[0] + kernel[0])
            cols = slice(j * stride[1], j * stride[1] + kernel[1])
            win = xp[:, :, rows, cols]
            if kind == "max":
                y[:, :, i, j] = win.max(axis=(2, 3))
            else:
                area = kernel[0] * kernel[1] if count_include_pad else inside[rows, cols].sum()
                y[:, :, i, j] = win.sum(axis=(2, 3)) / area
    return y


@pytest.mark.parametrize("stride,pad,bias", [((1, 1), (0, 0), True), ((2, 1), (1, 2), True),
                                             ((2, 2), (1, 1), False)])
def test_convolution_matches_numpy(stride, pad, bias):
    x, w, b = rand(2, 3, 7, 6), rand(4, 3, 3, 2), rand(4)
    y = npx.convolution(np.array(x), np.array(w), np.array(b) if bias else None, kernel=(3, 2),
                        stride=stride, dilate=(1, 1), pad=pad, num_filter=4, no_bias=not bias,
                        layout="NCHW")
    close(y, conv_ref(x, w, b if bias else None, stride, pad), 1e-4)
    # no_bias=True ignores a bias that is passed; keyword hints of MXNet are accepted.
    y2 = npx.convolution(data=np.array(x), weight=np.array(w), bias=np.array(b), kernel=(3, 2),
                         stride=stride, pad=pad, num_filter=4, no_bias=True, cudnn_off=True)
    close(y2, conv_ref(x, w, None, stride, pad), 1e-4)


def test_convolution_errors_name_the_shapes():
    x = np.zeros((2, 3, 4, 4))
    with pytest.raises(ValueError, match=r"input of shape \(2, 3, 4, 4\) has 3 channels, "
                                         r"weight \(8, 1, 3, 3\) expects 1"):
        npx.convolution(x, np.zeros((8, 1, 3, 3)), kernel=(3, 3), num_filter=8, no_bias=True)
    with pytest.raises(ValueError, match=r"kernel \(5, 5\) is larger than the padded input"):
        npx.convolution(x, np.zeros((8, 3, 5, 5)), kernel=(5, 5), num_filter=8, no_bias=True)
    with pytest.raises(ValueError, match="num_filter 7 does not match"):
        npx.convolution(x, np.zeros((8, 3, 3, 3)), kernel=(3, 3), num_filter=7, no_bias=True)
    with pytest.raises(ValueError, match="kernel"):
        npx.convolution(x, np.zeros((8, 3, 3, 3)), kernel=(2, 2), num_filter=8, no_bias=True)
    with pytest.raises(ValueError, match="dilate"):
        npx.convolution(x, np.zeros((8, 3, 3, 3)), kernel=(3, 3), dilate=(2, 2), no_bias=True)
    with pytest.raises(ValueError, match="layout"):
        npx.convolution(x, np.zeros((8, 3, 3, 3)), kernel=(3, 3), layout="NHWC", no_bias=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'strides'"):
        npx.convolution(x, np.zeros((8, 3, 3, 3)), kernel=(3, 3), strides=(1, 1))


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("kernel,stride,pad", [((2, 2), (2, 2), (0, 0)), ((3, 3), (2, 1), (1, 1))])
def test_pooling_matches_numpy(kind, kernel, stride, pad):
    x = rand(2, 3, 7, 6)
    y = npx.pooling(np.array(x), kernel=kernel, stride=stride, pad=pad, pool_type=kind,
                    layout="NCHW")
    close(y, pool_ref(x, kernel, stride, pad, kind))


def test_pooling_defaults_global_and_count_include_pad():
    x = rand(2, 3, 5, 4)
    close(npx.pooling(np.array(x), kernel=(2, 2)), pool_ref(x, (2, 2), (1, 1), (0, 0), "max"))
    g = npx.pooling(np.array(x), pool_type="avg", global_pool=True)
    assert g.shape == (2, 3, 1, 1)
    close(g, x.mean(axis=(2, 3), keepdims=True))
    close(npx.pooling(np.array(x), kernel=(1, 1), pool_type="max", global_pool=True),
          x.max(axis=(2, 3), keepdims=True))
    close(npx.pooling(np.array(x), kernel=(3, 3), pad=(1, 1), pool_type="avg",
                      count_include_pad=False),
          pool_ref(x, (3, 3), (1, 1), (1, 1), "avg", count_include_pad=False))
    with pytest.raises(ValueError, match=r"pooling: kernel \(6, 2\) is larger than the padded input"):
        npx.pooling(np.array(x), kernel=(6, 2))
    with pytest.raises(ValueError, match="pool_type 'sum'"):
        npx.pooling(np.array(x), kernel=(2, 2), pool_type="sum")
    with pytest.raises(ValueError, match="pooling_convention 'full'"):
        npx.pooling(np.array(x), kernel=(2, 2), pooling_convention="full")


def test_softmax_and_log_softmax():
    x = rand(6, 10) * 5
    e = numpy.exp(x - x.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    close(npx.softmax(np.array(x)), p)
    close(npx.softmax(np.array(x), axis=1), p)
    lp = npx.log_softmax(np.array(x), axis=-1)
    close(lp, numpy.log(p), 1e-4)
    x3 = rand(2, 3, 4)
    e3 = numpy.exp(x3 - x3.max(axis=-1, keepdims=True))
    close(npx.softmax(np.array(x3)), e3 / e3.sum(axis=-1, keepdims=True))
    e0 = numpy.exp(x3 - x3.max(axis=0, keepdims=True))
    close(npx.softmax(np.array(x3), axis=0), e0 / e0.sum(axis=0, keepdims=True))
    l1 = x3 - x3.max(axis=1, keepdims=True)
    close(npx.log_softmax(np.array(x3), axis=1),
          l1 - numpy.log(numpy.exp(l1).sum(axis=1, keepdims=True)), 1e-5)
    with pytest.raises(ValueError, match="axis 3 is out of range"):
        npx.softmax(np.array(x3), axis=3)
    with pytest.raises(ValueError, match="temperature"):
        npx.softmax(np.array(x), temperature=2.0)


def bn_ref(x, gamma, beta, eps):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean = x.astype(numpy.float64).mean(axis=axes)
    var = x.astype(numpy.float64).var(axis=axes)
    y = (x - mean.reshape(shape)) / numpy.sqrt(var.reshape(shape) + eps) * gamma.reshape(shape) \
        + beta.reshape(shape)
    return y, mean, var


@pytest.mark.parametrize("shape", [(4, 3, 5, 2), (8, 5)])
def test_batch_norm_training_and_global_stats(shape):
    x = rand(*shape) * 2 + 1
    c = shape[1]
    gamma, beta = rand(c), rand(c)
    rm, rv = np.zeros(c), np.ones(c)
    with autograd.train_mode():
        y = npx.batch_norm(np.array(x), np.array(gamma), np.array(beta), rm, rv, eps=1e-5,
                           momentum=0.9, fix_gamma=False, use_global_stats=False, axis=1)
    want, mean, var = bn_ref(x, gamma, beta, 1e-5)
    close(y, want, 1e-4)
    # The running statistics are updated in place, as MXNet does (biased variance).
    close(rm, 0.1 * mean, 1e-5)
    close(rv, 0.9 + 0.1 * var, 1e-5)
    # use_global_stats, or predict mode (outside autograd.record), normalizes with the running
    # statistics and leaves them as they are.
    with autograd.train_mode():
        g = npx.batch_norm(np.array(x), np.array(gamma), np.array(beta), rm, rv, eps=1e-5,
                           fix_gamma=False, use_global_stats=True)
    p = npx.batch_norm(np.array(x), np.array(gamma), np.array(beta), rm, rv, eps=1e-5,
                       fix_gamma=False)
    numpy.testing.assert_array_equal(p.asnumpy(), g.asnumpy())
    shape1 = (1, -1) + (1,) * (x.ndim - 2)
    rmv, rvv = 0.1 * mean, 0.9 + 0.1 * var
    close(g, (x - rmv.reshape(shape1)) / numpy.sqrt(rvv.reshape(shape1) + 1e-5)
          * gamma.reshape(shape1) + beta.reshape(shape1), 1e-4)
    close(rm, rmv, 1e-5)
    # MXNet's default fix_gamma=True takes gamma as 1.
    rm2, rv2 = np.zeros(c), np.ones(c)
    with autograd.train_mode():
        f = npx.batch_norm(np.array(x), np.array(gamma), np.array(beta), rm2, rv2, eps=1e-5)
    close(f, bn_ref(x, numpy.ones(c, numpy.float32), beta, 1e-5)[0], 1e-4)


def test_batch_norm_errors():
    x = np.zeros((2, 3, 4, 4))
    rm, rv = np.zeros(3), np.ones(3)
    with pytest.raises(ValueError, match=r"gamma of shape \(4,\) does not match the 3 channels"):
        npx.batch_norm(x, np.ones(4), np.zeros(3), rm, rv)
    with pytest.raises(ValueError, match="only axis=1"):
        npx.batch_norm(x, np.ones(3), np.zeros(3), rm, rv, axis=3)


def numeric_grad(f, x, r, h=1e-3):
    """d/dx of sum(r * f(x)) by central differences, in float64."""
    g = numpy.zeros_like(x, dtype=numpy.float64)
    flat = x.astype(numpy.float64).ravel()
    for i in range(flat.size):
        up, down = flat.copy(), flat.copy()
        up[i] += h
        down[i] -= h
        g.ravel()[i] = ((f(up.reshape(x.shape)) - f(down.reshape(x.shape))) * r).sum() / (2 * h)
    return g


def test_gradients_through_autograd_match_finite_differences():
    x, w, b = rand(2, 2, 5, 5), rand(3, 2, 3, 3), rand(3)
    gamma, beta = rand(3), rand(3)
    xa, wa, ba, ga, bb = (np.array(v) for v in (x, w, b, gamma, beta))
    for a in (xa, wa, ba, ga, bb):
        a.attach_grad()
    rm, rv = np.zeros(3), np.ones(3)
    with autograd.record():
        y = npx.convolution(xa, wa, ba, kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=3)
        z = npx.batch_norm(y, ga, bb, rm, rv, eps=1e-5, fix_gamma=False)
        p = npx.pooling(z, kernel=(2, 2), stride=(1, 1), pool_type="avg")
        out = npx.log_softmax(p.reshape((2, 12)))
    r = rand(2, 12)
    out.backward(np.array(r))

    def net(xv, wv, bv, gv, betav):
        yv = conv_ref(xv, wv, bv, (2, 2), (1, 1))
        zv = bn_ref(yv, gv, betav, 1e-5)[0]
        pv = pool_ref(zv, (2, 2), (1, 1), (0, 0), "avg").reshape(2, 12)
        return pv - numpy.log(numpy.exp(pv - pv.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
            - pv.max(-1, keepdims=True)

    args = [x, w, b, gamma, beta]
    for i, a in enumerate((xa, wa, ba, ga, bb)):
        def f(v, i=i):
            return net(*[v if j == i else args[j].astype(numpy.float64) for j in range(5)])
        numpy.testing.assert_allclose(a.grad.asnumpy(), numeric_grad(f, args[i], r),
                                      rtol=2e-3, atol=2e-3)


def test_max_pool_and_softmax_gradients():
    x = (RNG.permutation(2 * 2 * 6 * 6).reshape(2, 2, 6, 6) * 0.05).astype(numpy.float32)
    xa = np.array(x)
    xa.attach_grad()
    with autograd.record():
        y = npx.softmax(npx.pooling(xa, kernel=(3, 3), stride=(2, 2), pad=(1, 1)).reshape((2, 18)))
    r = rand(2, 18)
    y.backward(np.array(r))

    def f(v):
        pv = pool_ref(v, (3, 3), (2, 2), (1, 1), "max").reshape(2, 18)
        e = numpy.exp(pv - pv.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    numpy.testing.assert_allclose(xa.grad.asnumpy(), numeric_grad(f, x, r, h=1e-4),
                                  rtol=1e-3, atol=1e-3)
