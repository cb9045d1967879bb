"""depengine.gluon without gradients: parameters, initializers, layers, losses against NumPy's
formulas, data loading, save/load, hybridized inference, and the errors."""
import os

import numpy
import pytest

from depengine import gluon, init, np, npx
from depengine.gluon import nn
from depengine.gluon.data import ArrayDataset, DataLoader
from depengine.gluon.data.vision import transforms


def close(a, b, rtol=1e-5, atol=1e-6):
    numpy.testing.assert_allclose(a.asnumpy() if hasattr(a, "asnumpy") else a, b, rtol=rtol,
                                  atol=atol)


def mlp():
    net = nn.Sequential()
    net.add(nn.Dense(8, activation="relu"), nn.Dense(3))
    return net


# ---- Parameters and deferred initialization ----

def test_dense_infers_in_units_at_the_first_forward():
    net = mlp()
    net.initialize()
    w0 = net[0].weight
    assert w0.shape == (8, 0)
    with pytest.raises(gluon.DeferredInitializationError, match="first forward"):
        w0.data()
    out = net(np.ones((4, 5)))
    assert out.shape == (4, 3)
    assert w0.shape == (8, 5) and net[0].bias.shape == (8,)
    assert net[1].weight.shape == (3, 8)
    assert net[0].weight.data().shape == (8, 5)


def test_given_in_units_initializes_at_once_and_flatten():
    layer = nn.Dense(4, in_units=6)
    layer.initialize()
    assert layer.weight.data().shape == (4, 6)
    assert layer(np.ones((2, 2, 3))).shape == (2, 4)        # flatten: 2·3 features
    keep = nn.Dense(4, flatten=False, in_units=3)
    keep.initialize()
    assert keep(np.ones((2, 5, 3))).shape == (2, 5, 4)


def test_dense_matches_numpy():
    layer = nn.Dense(3, activation="tanh", in_units=4)
    layer.initialize(init.Normal(0.5))
    x = numpy.random.default_rng(1).standard_normal((5, 4)).astype(numpy.float32)
    w = layer.weight.data().asnumpy()
    b = numpy.array([0.1, -0.2, 0.3], dtype=numpy.float32)
    layer.bias.set_data(np.array(b))
    close(layer(np.array(x)), numpy.tanh(x @ w.T + b), rtol=1e-4)


def test_collect_params_names_and_select():
    net = mlp()
    names = list(net.collect_params().keys())
    assert len(names) == 4
    assert all(n.startswith("dense") for n in names)
    assert [n.endswith("weight") for n in names] == [True, False, True, False]
    weights = net.collect_params(".*weight")
    assert list(weights.keys()) == [names[0], names[2]]
    assert len(net.collect_params(".*weight|.*bias")) == 4
    assert [p.name for p in weights.values()] == [names[0], names[2]]


def test_name_scope_nests_prefixes():
    class Net(gluon.Block):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.hidden = nn.Dense(4)
                self.out = nn.Dense(2)

        def forward(self, x):
            return self.out(self.hidden(x))

    net = Net(prefix="model_")
    assert list(net.collect_params().keys()) == [
        "model_dense0_weight", "model_dense0_bias", "model_dense1_weight", "model_dense1_bias"]
    net.initialize()
    assert net(np.ones((2, 3))).shape == (2, 2)


def test_parameter_basics():
    p = gluon.Parameter("w", shape=(2, 3))
    with pytest.raises(RuntimeError, match="has not been initialized"):
        p.data()
    p.initialize(init=init.One())
    close(p.data(), numpy.ones((2, 3)))
    assert p.list_data()[0] is p.data()
    p.set_data(np.full((2, 3), 4.0))
    close(p.data(), numpy.full((2, 3), 4.0))
    with pytest.raises(ValueError, match=r"set_data of shape \(3, 2\).*\(2, 3\)"):
        p.set_data(np.ones((3, 2)))
    with pytest.raises(ValueError, match="grad_req"):
        p.grad_req = "sometimes"
    with pytest.warns(UserWarning, match="already initialized"):
        p.initialize()
    p.initialize(init=init.Zero(), force_reinit=True)
    close(p.data(), numpy.zeros((2, 3)))
    with pytest.raises(ValueError, match="invalid shape"):
        gluon.Parameter("v", shape=(0, 3)).initialize()
    assert "Parameter w (shape=(2, 3), dtype=float32)" == repr(p)


def test_bias_initializer_and_parameter_init_take_precedence():
    layer = nn.Dense(3, in_units=2, weight_initializer=init.Constant(0.5))
    layer.initialize(init.One())       # the layer's own initializers win
    close(layer.weight.data(), numpy.full((3, 2), 0.5))
    close(layer.bias.data(), numpy.zeros(3))
    layer2 = nn.Dense(3, in_units=2, bias_initializer="ones")
    layer2.initialize(init.Zero())
    close(layer2.bias.data(), numpy.ones(3))


# ---- Initializers ----

def test_initializer_statistics():
    big = (400, 500)
    np.random.seed(3)
    u = init.Uniform(0.07)("w_weight", big).asnumpy()
    assert u.min() >= -0.07 and u.max() <= 0.07 and abs(u.mean()) < 2e-3
    assert abs(u.std() - 0.07 / numpy.sqrt(3)) < 2e-3
    n = init.Normal(0.01)("w_weight", big).asnumpy()
    assert abs(n.mean()) < 2e-4 and abs(n.std() - 0.01) < 2e-4
    x = init.Xavier()("w_weight", big).asnumpy()
    scale = numpy.sqrt(3 / ((400 + 500) / 2))
    assert x.max() <= scale and abs(x.std() - scale / numpy.sqrt(3)) < 2e-3
    g = init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2)("w_weight", big).asnumpy()
    assert abs(g.std() - numpy.sqrt(2 / 500)) < 2e-3
    close(init.Constant(2.5)("c_weight", (3,)), numpy.full(3, 2.5))
    # A net-wide initializer leaves biases at zero, as MXNet's.
    close(init.Normal(1.0)("dense0_bias", (4,)), numpy.zeros(4))


def test_same_seed_same_parameters_on_every_engine():
    def params(engine):
        with engine:
            np.random.seed(42)
            net = mlp()
            net.initialize(init.Xavier())
            net(np.ones((2, 7)))
            return [p.data().asnumpy() for p in net.collect_params().values()]

    import depengine as de
    ref = params(de.Engine("naive"))
    for threads in (1, 2, 4):
        got = params(de.Engine("threaded", cpu_threads=threads))
        for a, b in zip(ref, got):
            numpy.testing.assert_array_equal(a, b)
    assert not numpy.array_equal(ref[0], numpy.zeros_like(ref[0]))


def test_initializer_errors():
    with pytest.raises(ValueError, match="unknown initializer 'glorot_magic'"):
        nn.Dense(3, in_units=2, weight_initializer="glorot_magic").initialize()
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        init.Xavier()("w_weight", (5,))
    with pytest.raises(ValueError, match="rnd_type"):
        init.Xavier(rnd_type="triangular")
    assert isinstance(init.create("xavier"), init.Xavier)
    assert isinstance(init.create("zeros"), init.Zero)


# ---- Layers ----

def test_activations_match_numpy():
    x = numpy.linspace(-30, 30, 13).astype(numpy.float32).reshape(1, 13)
    expect = {"relu": numpy.maximum(x, 0), "sigmoid": 1 / (1 + numpy.exp(-x)),
              "tanh": numpy.tanh(x), "softrelu": numpy.logaddexp(0, x),
              "softsign": x / (1 + numpy.abs(x))}
    for name, want in expect.items():
        close(nn.Activation(name)(np.array(x)), want, rtol=1e-5, atol=1e-6)


def test_unknown_activation_is_a_value_error():
    with pytest.raises(ValueError, match="unknown activation 'swishy'"):
        nn.Activation("swishy")
    with pytest.raises(ValueError, match="unknown activation"):
        nn.Dense(3, activation="swishy")


def test_wrong_input_shape_names_the_layer_and_both_shapes():
    layer = nn.Dense(4, in_units=6)
    layer.initialize()
    with pytest.raises(ValueError) as e:
        layer(np.ones((2, 5)))
    msg = str(e.value)
    assert layer.name in msg and "(2, 5)" in msg and "(4, 6)" in msg
    net = mlp()
    net.initialize()
    net(np.ones((2, 5)))
    with pytest.raises(ValueError, match=r"dense\d+: an input of shape \(2, 4\).*\(8, 5\)"):
        net(np.ones((2, 4)))


def test_sequential_indexing_and_len():
    net = mlp()
    assert len(net) == 2 and isinstance(net[1], nn.Dense)
    head = net[:1]
    assert isinstance(head, nn.Sequential) and len(head) == 1 and head[0] is net[0]
    net.initialize()
    x = np.ones((3, 4))
    close(net[1](net[0](x)), net(x).asnumpy())
    assert "Dense(4 -> 8, Activation(relu))" in repr(net)
    hs = nn.HybridSequential()
    with pytest.raises(ValueError, match="HybridBlocks"):
        hs.add(nn.Sequential())


def test_flatten_and_dropout_outside_recording():
    x = np.array(numpy.arange(24, dtype=numpy.float32).reshape(2, 3, 4))
    assert nn.Flatten()(x).shape == (2, 12)
    close(nn.Dropout(0.5)(x), x.asnumpy())            # not recording: the identity
    with pytest.raises(ValueError, match="rate"):
        nn.Dropout(1.0)


def test_hybridized_inference_matches_eager_and_replays():
    np.random.seed(0)
    net = nn.HybridSequential()
    net.add(nn.Dense(16, activation="relu"), nn.Dense(16, activation="sigmoid"), nn.Dense(2))
    net.initialize(init.Xavier())
    xs = [np.random.normal(size=(5, 7)) for _ in range(3)]
    eager = [net(x).asnumpy() for x in xs]
    net.hybridize()
    first = net(xs[0])
    outs = [net(x) for x in xs]
    assert len(net._cached) == 1                       # recorded once, replayed after
    for got, want in zip(outs, eager):
        numpy.testing.assert_array_equal(got.asnumpy(), want)
    numpy.testing.assert_array_equal(first.asnumpy(), eager[0])   # not overwritten by replays
    assert net(np.ones((2, 7))).shape == (2, 2)        # another shape: a new recording
    assert len(net._cached) == 2
    # A parameter given new storage starts a new recording that reads it.
    net[2].bias.set_data(np.full((2,), 10.0))
    numpy.testing.assert_allclose(net(xs[0]).asnumpy(), eager[0] + 10.0, rtol=1e-5)


# ---- Losses against NumPy ----

def rng_arrays(*shapes, seed=0):
    r = numpy.random.default_rng(seed)
    return [r.standard_normal(s).astype(numpy.float32) for s in shapes]


def test_l2_and_l1_losses():
    pred, label = rng_arrays((4, 3), (4, 3))
    close(gluon.loss.L2Loss()(np.array(pred), np.array(label)),
          (0.5 * (label - pred) ** 2).mean(axis=1))
    close(gluon.loss.L1Loss()(np.array(pred), np.array(label)), numpy.abs(label - pred).mean(axis=1))
    w = numpy.array([[1.0], [2.0], [0.0], [0.5]], dtype=numpy.float32)
    close(gluon.loss.L2Loss(weight=3.0)(np.array(pred), np.array(label), np.array(w)),
          (1.5 * (label - pred) ** 2 * w).mean(axis=1))
    # A (n,) label against an (n, 1) prediction is reshaped, as in the chapter's loop.
    p1 = pred[:, :1]
    close(gluon.loss.L2Loss()(np.array(p1), np.array(label[:, 0])),
          (0.5 * (label[:, :1] - p1) ** 2).mean(axis=1))


def log_softmax(z, axis=-1):
    z = z - z.max(axis=axis, keepdims=True)
    return z - numpy.log(numpy.exp(z).sum(axis=axis, keepdims=True))


def test_softmax_cross_entropy():
    (z,) = rng_arrays((6, 5))
    y = numpy.array([0, 4, 2, 2, 1, 3], dtype=numpy.float32)
    want = -log_softmax(z)[numpy.arange(6), y.astype(int)]
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    close(loss(np.array(z), np.array(y)), want, rtol=1e-5)
    close(gluon.loss.SoftmaxCELoss(from_logits=True)(np.array(log_softmax(z)), np.array(y)), want,
          rtol=1e-5)
    dense = numpy.eye(5, dtype=numpy.float32)[y.astype(int)] * 0.7 + 0.06
    close(gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False)(np.array(z), np.array(dense)),
          -(log_softmax(z) * dense).sum(axis=1), rtol=1e-5)
    # axis=1 of (n, classes, k): per sample, the mean over k.
    (z3,) = rng_arrays((2, 3, 4), seed=5)
    y3 = numpy.array([[0, 1, 2, 1], [2, 2, 0, 0]], dtype=numpy.float32)
    lp = log_softmax(z3, axis=1)
    want3 = -numpy.take_along_axis(lp, y3.astype(int)[:, None, :], axis=1)[:, 0, :].mean(axis=1)
    close(gluon.loss.SoftmaxCrossEntropyLoss(axis=1)(np.array(z3), np.array(y3)), want3, rtol=1e-5)
    with pytest.raises(ValueError, match=r"labels of shape \(5,\)"):
        loss(np.array(z), np.array(y[:5]))


def test_label_out_of_range_is_raised_at_the_blocker():
    import depengine as de
    l = gluon.loss.SoftmaxCrossEntropyLoss()(np.zeros((3, 4)), np.array([0, 4, 1]))  # returns
    with pytest.raises(de.Error, match=r"label 4 of sample 1 is not a class index in \[0, 4\)"):
        l.asnumpy()
    with pytest.raises(de.Error, match="label 4"):   # reported once more by waitall, as MXNet
        npx.waitall()


def test_sigmoid_binary_cross_entropy():
    (z,) = rng_arrays((5, 3), seed=2)
    z *= 10
    y = (numpy.random.default_rng(3).random((5, 3)) > 0.5).astype(numpy.float32)
    p = 1 / (1 + numpy.exp(-z.astype(numpy.float64)))
    want = -(y * numpy.log(p) + (1 - y) * numpy.log(1 - p)).mean(axis=1)
    close(gluon.loss.SigmoidBinaryCrossEntropyLoss()(np.array(z), np.array(y)), want, rtol=1e-4,
          atol=1e-5)
    q = numpy.clip(p, 1e-3, 1 - 1e-3).astype(numpy.float32)
    want_q = -(y * numpy.log(q + 1e-12) + (1 - y) * numpy.log(1 - q + 1e-12)).mean(axis=1)
    close(gluon.loss.SigmoidBCELoss(from_sigmoid=True)(np.array(q), np.array(y)), want_q, rtol=1e-4)


# ---- Data ----

def test_array_dataset_and_dataloader_batches():
    X = numpy.arange(20, dtype=numpy.float32).reshape(10, 2)
    y = numpy.arange(10, dtype=numpy.float32)
    ds = ArrayDataset(np.array(X), y)
    assert len(ds) == 10
    x3, y3 = ds[3]
    close(x3, X[3])
    assert y3 == 3
    keep = list(DataLoader(ds, batch_size=4))
    assert [b[0].shape for b in keep] == [(4, 2), (4, 2), (2, 2)]
    close(keep[2][1], [8, 9])
    assert len(DataLoader(ds, batch_size=4)) == 3
    discard = DataLoader(ds, batch_size=4, last_batch="discard")
    assert len(discard) == 2 and [b[1].shape for b in discard] == [(4,), (4,)]
    roll = DataLoader(ds, batch_size=4, last_batch="rollover")
    first = [b[1].asnumpy().tolist() for b in roll]
    second = [b[1].asnumpy().tolist() for b in roll]
    assert first == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert second[0] == [8, 9, 0, 1] and len(second) == 3
    with pytest.raises(ValueError, match="last_batch"):
        DataLoader(ds, batch_size=4, last_batch="sometimes")
    with pytest.raises(ValueError, match="same length"):
        ArrayDataset(X, y[:3])


def test_shuffle_is_a_permutation_and_seeded():
    y = numpy.arange(50, dtype=numpy.float32)
    ds = ArrayDataset(y)

    def epoch():
        return numpy.concatenate([b.asnumpy() for b in DataLoader(ds, batch_size=8, shuffle=True)])

    numpy.random.seed(7)
    a = epoch()
    numpy.random.seed(7)
    b = epoch()
    numpy.testing.assert_array_equal(a, b)
    assert sorted(a.tolist()) == y.tolist() and a.tolist() != y.tolist()


def test_batchify_fn_and_transform_first():
    data = gluon.data.SimpleDataset([(numpy.full((2, 2, 1), i, numpy.uint8), i) for i in range(5)])
    ds = data.transform_first(transforms.ToTensor())
    x, label = ds[2]
    assert x.shape == (1, 2, 2) and x.dtype == numpy.float32 and label == 2
    numpy.testing.assert_allclose(x, numpy.full((1, 2, 2), 2 / 255), rtol=1e-6)
    X, Y = next(iter(DataLoader(ds, batch_size=5)))
    assert X.shape == (5, 1, 2, 2) and Y.shape == (5,)
    seen = []
    loader = DataLoader(data, batch_size=2, batchify_fn=lambda s: seen.append(len(s)) or len(s))
    assert list(loader) == [2, 2, 1] and seen == [2, 2, 1]


def test_transforms():
    img = numpy.arange(2 * 3 * 2, dtype=numpy.uint8).reshape(2, 3, 2)
    t = transforms.ToTensor()(img)
    assert t.shape == (2, 2, 3)
    numpy.testing.assert_allclose(t, img.transpose(2, 0, 1) / 255.0, rtol=1e-6)
    norm = transforms.Normalize(mean=(0.1, 0.2), std=(0.5, 2.0))(t)
    numpy.testing.assert_allclose(norm[1], (t[1] - 0.2) / 2.0, rtol=1e-6)
    both = transforms.Compose([transforms.ToTensor(), transforms.Normalize(0.5, 0.25)])(img)
    numpy.testing.assert_allclose(both, (t - 0.5) / 0.25, rtol=1e-5)


FASHION = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not os.path.exists(os.path.join(FASHION, "t10k-labels-idx1-ubyte.gz")),
                    reason="Debian's dataset-fashion-mnist is not installed")
def test_fashion_mnist_reads_the_debian_files():
    test = gluon.data.vision.FashionMNIST(train=False)
    assert len(test) == 10000
    x, y = test[0]
    assert x.shape == (28, 28, 1) and x.dtype == numpy.uint8 and 0 <= y < 10
    loader = DataLoader(test.transform_first(transforms.ToTensor()), batch_size=256)
    X, Y = next(iter(loader))
    assert X.shape == (256, 1, 28, 28) and Y.shape == (256,)
    assert 0.0 <= X.asnumpy().min() and X.asnumpy().max() <= 1.0
    # The batch path (one gather op with the transforms) equals sample by sample.
    t = transforms.Compose([transforms.ToTensor(), transforms.Normalize(0.286, 0.353)])
    ds = test.transform_first(t)
    fast = next(iter(DataLoader(ds, batch_size=64)))
    slow = gluon.data.default_batchify_fn([ds[i] for i in range(64)])
    for a, b in zip(fast, slow):
        numpy.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    per_sample = ds.transform(lambda x, y: (x, y))       # a transform of its own: no gather op
    assert per_sample._gather_fields() is None


def test_missing_dataset_file_names_the_file_and_the_package(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        gluon.data.vision.FashionMNIST(root=str(tmp_path), train=True)
    assert str(tmp_path / "train-images-idx3-ubyte.gz") in str(e.value)
    assert "dataset-fashion-mnist" in str(e.value)
    with pytest.raises(FileNotFoundError) as e:
        gluon.data.vision.MNIST(root=str(tmp_path), train=False)
    assert str(tmp_path / "t10k-images-idx3-ubyte.gz") in str(e.value)
    assert "No Debian package provides MNIST" in str(e.value)


def test_a_bad_idx_file_is_named(tmp_path):
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x01" + b"\x00" * 12)
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x00")
    with pytest.raises(ValueError, match="t10k-images-idx3-ubyte: not an IDX file"):
        gluon.data.vision.MNIST(root=str(tmp_path), train=False)


# ---- Save and load ----

def test_save_load_round_trip(tmp_path):
    net = mlp()
    net.initialize(init.Normal(1.0))
    x = np.ones((2, 5))
    want = net(x).asnumpy()
    f = str(tmp_path / "mlp.params")
    net.save_parameters(f)
    other = mlp()                      # other names (dense2_, ...): structural keys match
    other.load_parameters(f)
    assert other[0].weight.shape == (8, 5)
    numpy.testing.assert_array_equal(other(x).asnumpy(), want)


def test_load_errors_name_the_parameters(tmp_path):
    net = mlp()
    net.initialize()
    net(np.ones((2, 5)))
    f = str(tmp_path / "mlp.params")
    net.save_parameters(f)
    bigger = nn.Sequential()
    bigger.add(nn.Dense(8, activation="relu"), nn.Dense(3), nn.Dense(1))
    with pytest.raises(ValueError, match=r"lacks parameter\(s\) 2.weight, 2.bias"):
        bigger.load_parameters(f)
    bigger.load_parameters(f, allow_missing=True)
    smaller = nn.Sequential()
    smaller.add(nn.Dense(8, activation="relu"))
    with pytest.raises(ValueError, match=r"has parameter\(s\) 1.weight, 1.bias"):
        smaller.load_parameters(f)
    wrong = nn.Sequential()
    wrong.add(nn.Dense(8, in_units=4), nn.Dense(3))
    with pytest.raises(ValueError, match=r"0.weight .* has shape \(8, 4\) .* but \(8, 5\)"):
        wrong.load_parameters(f)
    (tmp_path / "junk").write_bytes(b"not a parameter file")
    with pytest.raises(ValueError, match="junk is not a parameter file"):
        net.load_parameters(str(tmp_path / "junk"))
    with pytest.raises(RuntimeError, match="0.weight"):
        mlp().save_parameters(str(tmp_path / "never.params"))


def test_unknown_optimizer_is_a_value_error():
    net = mlp()
    net.initialize()
    with pytest.raises(ValueError, match="Cannot find optimizer 'sgdd'"):
        gluon.Trainer(net.collect_params(), "sgdd")
    with pytest.raises(ValueError, match="list or dict of Parameters"):
        gluon.Trainer(net, "sgd")
    t = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5})
    assert t.learning_rate == 0.5
    t.set_learning_rate(0.25)
    assert t.learning_rate == 0.25
    assert gluon.Trainer(net.collect_params(), "ADAM").learning_rate == 0.001
