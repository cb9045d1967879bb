"""hybridize() under autograd.record() (issue 24): a hybridized block's training steps replay
a recorded npx.CachedOp, and give the same bits as the eager steps — parameters, gradients,
Dropout masks, BatchNorm running statistics — on the naive engine and the threaded one with
1, 2 and 4 workers; a new shape, another mode or grad_req records again; grad_req='add',
retain_graph, two calls in one step, a gradient for the input, and the errors; a replay hands
out its outputs without a copy, and an output the caller keeps gets a copy of its own."""
import json

import numpy
import pytest

import depengine as de
from depengine import autograd, gluon, init, np, npx
from depengine.gluon import nn

ENGINES = [("naive", 0), ("threaded", 1), ("threaded", 2), ("threaded", 4)]
RNG = numpy.random.default_rng(24)
BATCHES = [RNG.standard_normal((8, 10)).astype(numpy.float32) for _ in range(5)]
LABELS = [numpy.arange(8, dtype=numpy.float32) % 3 for _ in range(5)]
IMAGES = [RNG.standard_normal((4, 2, 8, 8)).astype(numpy.float32) for _ in range(3)]


def engine_of(kind):
    name, workers = kind
    return de.Engine(name, cpu_threads=workers) if workers else de.Engine(name)


def mlp():
    net = nn.HybridSequential()
    net.add(nn.Dense(16, activation="relu"), nn.Dropout(0.3), nn.Dense(8, activation="tanh"),
            nn.Dropout(0.2), nn.Dense(3))
    return net


def cnn():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"), nn.MaxPool2D(),
            nn.Conv2D(6, 2, strides=2, activation="relu"), nn.BatchNorm(), nn.Flatten(),
            nn.Dropout(0.25), nn.Dense(3))
    return net


def train(make, hybrid, xs, labels, grad_req="write", optimizer="sgd"):
    """Steps of SGD from seed 7; returns every loss, gradient and parameter along the way,
    and the net."""
    npx.seed(7)
    net = make()
    net.initialize(init.Xavier())
    net(np.array(xs[0]))  # the deferred shapes, eagerly, before hybridize
    if grad_req != "write":
        net.collect_params().setattr("grad_req", grad_req)
    if hybrid:
        net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), optimizer,
                            {"learning_rate": 0.1, "momentum": 0.9} if optimizer == "sgd"
                            else {"learning_rate": 0.01})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    seen = []
    for x, y in zip(xs, labels):
        with autograd.record():
            loss = loss_fn(net(np.array(x)), np.array(y))
        loss.backward()
        trainer.step(x.shape[0])
        seen.append(loss.asnumpy())
        seen += [p.grad().asnumpy() for p in net.collect_params().values()
                 if p.grad_req != "null"]
    seen += [p.data().asnumpy() for p in net.collect_params().values()]
    return seen, net


def assert_same_bits(a, b):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        numpy.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("kind", ENGINES, ids=lambda k: f"{k[0]}{k[1]}")
def test_mlp_with_dropout_trains_to_the_same_bits_and_replays(kind):
    with engine_of(kind):
        eager, _ = train(mlp, False, BATCHES, LABELS)
        hybrid, net = train(mlp, True, BATCHES, LABELS)
    assert_same_bits(eager, hybrid)
    # Recorded at the first step, replayed at the four others.
    assert net.hybrid_stats() == {"records": 1, "replays": 4}


@pytest.mark.parametrize("kind", ENGINES, ids=lambda k: f"{k[0]}{k[1]}")
def test_cnn_with_batch_norm_trains_to_the_same_bits(kind):
    labels = [numpy.array([0, 1, 2, 1], dtype=numpy.float32)] * len(IMAGES)
    with engine_of(kind):
        eager, enet = train(cnn, False, IMAGES, labels, optimizer="adam")
        hybrid, hnet = train(cnn, True, IMAGES, labels, optimizer="adam")
        # The running statistics moved, as eager.
        for i in (1, 5):
            numpy.testing.assert_array_equal(enet[i].running_mean.data().asnumpy(),
                                             hnet[i].running_mean.data().asnumpy())
            numpy.testing.assert_array_equal(enet[i].running_var.data().asnumpy(),
                                             hnet[i].running_var.data().asnumpy())
        assert not numpy.all(hnet[1].running_mean.data().asnumpy() == 0)
    assert_same_bits(eager, hybrid)
    assert hnet.hybrid_stats() == {"records": 1, "replays": 2}


def test_grad_req_add_accumulates_as_eager_and_changing_it_records_again():
    eager, _ = train(mlp, False, BATCHES[:3], LABELS[:3], grad_req="add")
    hybrid, net = train(mlp, True, BATCHES[:3], LABELS[:3], grad_req="add")
    assert_same_bits(eager, hybrid)
    assert net.hybrid_stats() == {"records": 1, "replays": 2}
    net.collect_params().setattr("grad_req", "write")
    with autograd.record():
        net(np.array(BATCHES[0])).sum().backward()
    assert net.hybrid_stats()["records"] == 2


def test_frozen_parameters_get_no_gradient():
    runs = []
    for hybrid in (False, True):
        npx.seed(3)
        net = mlp()
        net.initialize()
        net(np.array(BATCHES[0]))
        net[0].collect_params().setattr("grad_req", "null")
        if hybrid:
            net.hybridize()
        for x in BATCHES[:3]:
            with autograd.record():
                l = net(np.array(x)).sum()
            l.backward()
        runs.append([p.grad().asnumpy() for p in net.collect_params().values()
                     if p.grad_req != "null"])
    assert_same_bits(*runs)
    assert net.hybrid_stats()["replays"] == 2


def test_new_shape_records_again_and_old_shape_replays():
    npx.seed(1)
    net = mlp()
    net.initialize()
    net(np.array(BATCHES[0]))  # the deferred shapes: the first call would run eagerly
    net.hybridize()
    for n in (8, 5, 8, 5, 8):
        with autograd.record():
            l = net(np.array(numpy.ones((n, 10), numpy.float32))).sum()
        l.backward()
    assert net.hybrid_stats() == {"records": 2, "replays": 3}


def test_train_and_predict_mode_have_separate_recordings():
    npx.seed(2)
    net = mlp()
    net.initialize()
    net(np.array(BATCHES[0]))
    plain = mlp()
    plain.initialize()
    plain(np.array(BATCHES[0]))
    for p, q in zip(net.collect_params().values(), plain.collect_params().values()):
        q.set_data(p.data())
    net.hybridize()
    x = np.array(BATCHES[1])
    outs = []
    for train_mode in (True, False, True, False):
        with autograd.record(train_mode=train_mode):
            out = net(x)
            ref = plain(x)
        outs.append(out.asnumpy())
        if not train_mode:
            # Dropout is the identity in predict mode: the same bits as the eager net.
            numpy.testing.assert_array_equal(out.asnumpy(), ref.asnumpy())
    assert not numpy.array_equal(outs[0], outs[1])  # train mode dropped units
    assert net.hybrid_stats() == {"records": 2, "replays": 2}


def test_retain_graph_and_two_calls_in_one_step_match_eager():
    def step(net, x1, x2):
        with autograd.record():
            l = (net(x1) * net(x2)).sum()  # the same shape twice: two recordings
        l.backward(retain_graph=True)
        l.backward()  # grad_req add: the gradient twice

    runs = []
    for hybrid in (False, True):
        npx.seed(4)
        net = mlp()
        net.initialize()
        net(np.array(BATCHES[0]))
        net.collect_params().setattr("grad_req", "add")
        if hybrid:
            net.hybridize()
        for i in range(3):
            step(net, np.array(BATCHES[i]), np.array(BATCHES[i + 1]))
        runs.append([p.grad().asnumpy() for p in net.collect_params().values()])
    assert_same_bits(*runs)
    # Two calls in a step need two recordings (the first call's gradient reads its arrays
    # until backward); after that both replay.
    assert net.hybrid_stats() == {"records": 2, "replays": 4}
    with pytest.raises(de.Error, match="freed by an earlier backward"):
        with autograd.record():
            l = net(np.array(BATCHES[0])).sum()
        l.backward()
        l.backward()


def test_input_gradient_and_residual_use_match_eager():
    runs = []
    for hybrid in (False, True):
        npx.seed(5)
        net = nn.HybridSequential()
        net.add(nn.Dense(10, activation="tanh"), nn.Dense(10))
        net.initialize()
        if hybrid:
            net(np.array(BATCHES[0]))
            net.hybridize()
        x = np.array(BATCHES[2])
        x.attach_grad()
        for _ in range(2):
            with autograd.record():
                h = x * 2.0
                l = ((h + net(h)) ** 2).sum()
            l.backward()
        runs.append([x.grad.asnumpy()] + [p.grad().asnumpy()
                                          for p in net.collect_params().values()])
    assert_same_bits(*runs)


def test_wrong_input_shape_names_the_layer_and_both_shapes():
    net = nn.HybridSequential()
    net.add(nn.Dense(4, in_units=10, prefix="fc1_"))
    net.initialize()
    net.hybridize()
    with autograd.record():
        net(np.array(BATCHES[0])).sum().backward()
    with pytest.raises(ValueError, match=r"fc1_?: an input of shape \(8, 7\) has 7 features "
                                         r"per sample, but the weight has shape \(4, 10\)"):
        with autograd.record():
            net(np.array(numpy.ones((8, 7), numpy.float32)))
    # The failed recording is not kept: the right shape still replays.
    with autograd.record():
        net(np.array(BATCHES[1])).sum().backward()
    assert net.hybrid_stats() == {"records": 1, "replays": 1}


def test_cached_op_errors():
    w = np.ones((2, 2))
    w.attach_grad()
    x = np.ones((1, 2))
    with autograd.record():
        op = npx.CachedOp.record("blk", lambda a: [np.dot(a, w)], [x.copy()], [False], [w])
    with pytest.raises(ValueError, match=r"blk: input 0 has shape \(3, 2\), the op was "
                                         r"recorded with \(1, 2\)"):
        op([np.ones((3, 2))], [w])
    with pytest.raises(TypeError, match="inputs must be ndarrays"):
        op([1.0], [w])
    with pytest.raises(TypeError, match="the forward's outputs must be a list of ndarrays, "
                                        "got int"):
        with autograd.record():
            npx.CachedOp.record("blk", lambda a: 3, [x.copy()], [False], [w])


class TwoHeads(gluon.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.a = nn.Dense(3, in_units=10)
            self.b = nn.Dense(2, in_units=10, activation="tanh")

    def forward(self, x):
        return self.a(x), [self.b(x)]


def test_an_output_without_gradient_leaves_its_parameters_gradients_as_eager():
    # Step 2 uses only the first output: eager pushes no gradient for b's nodes, so b's
    # gradient buffers keep step 1's values (they are not overwritten with zeros).
    runs = []
    for hybrid in (False, True):
        npx.seed(6)
        net = TwoHeads()
        net.initialize()
        if hybrid:
            net.hybridize()
        x = np.array(BATCHES[0])
        for both in (True, False):
            with autograd.record():
                first, (second,) = net(x)
                l = first.sum() + second.sum() if both else first.sum()
            l.backward()
        runs.append([p.grad().asnumpy() for p in net.collect_params().values()])
    assert_same_bits(*runs)
    assert numpy.any(runs[1][-1] != 0)
    assert net.hybrid_stats() == {"records": 1, "replays": 1}


def test_inside_a_user_recorded_region_the_block_runs_eagerly():
    # npx.record of a step that calls a hybridized block: the block's own segment would
    # nest in the user's, which records refuse ("records do not nest") — failed before.
    npx.seed(8)
    net = nn.HybridSequential()
    net.add(nn.Dense(6, activation="relu"), nn.Dense(2))
    net.initialize()
    x = np.array(BATCHES[0])
    want = net(x).asnumpy()
    net.hybridize()
    out = {}

    def step():
        out["predict"] = net(x)
        with autograd.record():
            out["train"] = net(x)

    seg = npx.record(step)
    npx.replay(seg)
    numpy.testing.assert_array_equal(out["predict"].asnumpy(), want)
    numpy.testing.assert_array_equal(out["train"].asnumpy(), want)
    assert net.hybrid_stats() == {"records": 0, "replays": 0}


def test_a_garbage_collection_during_the_recording_deletes_nothing_inside_it():
    # Unreachable blocks (a block and its name scope form a cycle) hold arrays; a cyclic
    # collection inside the recording freed them there, and a delete_var inside a recorded
    # region is refused ("delete_var inside a recorded region cannot be replayed").
    import gc

    class Collecting(gluon.HybridBlock):
        def forward(self, x):
            for _ in range(20 * gc.get_threshold()[0]):  # enough allocations for a collection
                cycle = []
                cycle.append(cycle)
            return x * 2.0

    for _ in range(3):
        garbage = nn.Dense(4, in_units=3)
        garbage.initialize()
        del garbage
    net = Collecting()
    net.hybridize()
    x = np.ones((2, 3))
    x.attach_grad()
    for _ in range(2):
        with autograd.record():
            y = net(x).sum()
        y.backward()
        numpy.testing.assert_array_equal(net(x).asnumpy(), numpy.full((2, 3), 2.0))
    numpy.testing.assert_array_equal(x.grad.asnumpy(), numpy.full((2, 3), 2.0))
    assert net.hybrid_stats() == {"records": 2, "replays": 2}


def step_op_names(net, x, y, trainer, loss_fn):
    """The names of the ops one training step ran."""
    with de.profile() as prof:
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(x.shape[0])
        npx.waitall()
    return [e["name"] for e in json.loads(prof.chrome_trace())["traceEvents"]
            if e.get("ph") == "X"]


@pytest.mark.parametrize("container", ["HybridSequential", "Sequential"])
def test_a_replayed_training_step_copies_no_output(container):
    # A replay hands out the segment's own outputs while no caller keeps them past the next
    # call (before: one `copy` op per output and call, for each hybridized block; a
    # Sequential's hybridize() makes each layer one, as in examples/python/mnist_cnn.py).
    npx.seed(3)
    net = getattr(nn, container)()
    net.add(nn.Dense(16, activation="relu"), nn.Dropout(0.3), nn.Dense(3))
    net.initialize()
    net(np.array(BATCHES[0]))
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for x, y in zip(BATCHES[:3], LABELS):
        names = step_op_names(net, np.array(x), np.array(y), trainer, loss_fn)
    assert "dropout" in " ".join(names) or "random_uniform" in names, names  # a real step
    assert "copy" not in names, names
    stats = [net.hybrid_stats()] if container == "HybridSequential" else [
        b.hybrid_stats() for b in net]
    assert all(s == {"records": 1, "replays": 2} for s in stats), stats


@pytest.mark.parametrize("keep", ["outputs", "views"])
def test_outputs_kept_across_calls_keep_their_values(keep):
    # A caller that keeps outputs: a replay must not overwrite them. A kept output gets a
    # copy of its own at the next call, which then replays. A kept view of one cannot be
    # given one: the next call records anew, and once two recordings are held the block
    # copies its outputs at every call (the pool does not grow by a recording per call).
    # Every kept array is eager's bits.
    runs = []
    for hybrid in (False, True):
        npx.seed(6)
        net = mlp()
        net.initialize()
        net(np.array(BATCHES[0]))
        if hybrid:
            net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        kept = []
        for x in BATCHES[:4]:
            with autograd.record():
                out = net(np.array(x))
                loss = (out * out).sum()
            loss.backward()
            trainer.step(x.shape[0])
            kept.append(out if keep == "outputs" else out.reshape((-1,)))
        runs.append([o.asnumpy() for o in kept])
    assert_same_bits(*runs)
    assert net.hybrid_stats() == ({"records": 1, "replays": 3} if keep == "outputs" else
                                  {"records": 3, "replays": 1})


def test_cached_op_outputs_without_a_copy_hold_the_op_while_alive():
    w = np.ones((2, 2))
    w.attach_grad()
    x = np.ones((1, 2))
    with autograd.record():
        op = npx.CachedOp.record("blk", lambda a: [np.dot(a, w)], [x.copy()], [False], [w])
    y = op([x], [w], copy_outputs=False)[0]
    assert op.held
    view = y.reshape((2,))  # shares y's storage
    del y
    assert op.held
    with pytest.raises(ValueError, match="blk: called while an output of its previous call, "
                                         "handed out without a copy, is still alive"):
        op([x * 2.0], [w])
    numpy.testing.assert_array_equal(view.asnumpy(), [2.0, 2.0])
    del view
    assert not op.held
    z = op([x * 2.0], [w], copy_outputs=False)[0]
    numpy.testing.assert_array_equal(z.asnumpy(), [[4.0, 4.0]])
    # A caller's own handles can be given storage of their own (a copy, history kept).
    assert op._release([z])
    assert not op.held
    numpy.testing.assert_array_equal(op([x], [w], copy_outputs=False)[0].asnumpy(), [[2.0, 2.0]])
    numpy.testing.assert_array_equal(z.asnumpy(), [[4.0, 4.0]])
    # Copied outputs leave it free.
    c = op([x * 3.0], [w])[0]
    assert not op.held
    numpy.testing.assert_array_equal(c.asnumpy(), [[6.0, 6.0]])
