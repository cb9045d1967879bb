"""The snippets of d2l's MXNet edition, chapters 2-5 (the preliminaries, linear and softmax
regression from scratch, MLPs, polynomial fitting, weight decay, dropout, file I/O), run as a
new user would: each raised on depengine before these ops existed."""
import math
import random

import numpy as onp

from depengine import autograd, np, npx


def sgd(params, lr, batch_size):
    for param in params:
        param[:] = param - lr * param.grad / batch_size


def softmax(X):
    X_exp = np.exp(X)
    partition = X_exp.sum(1, keepdims=True)
    return X_exp / partition


def cross_entropy(y_hat, y):
    return - np.log(y_hat[range(len(y_hat)), y])



def test_2_1_ndarray():
    x = np.arange(12); x.shape; x.size; X = x.reshape(3, 4); X = x.reshape(-1, 4); X = x.reshape(3, -1)
    np.empty((3, 4)); np.zeros((2, 3, 4)); np.ones((2, 3, 4)); np.random.normal(0, 1, size=(3, 4))
    np.array([[2, 1, 4, 3], [1, 2, 3, 4], [4, 3, 2, 1]])
    x = np.array([1, 2, 4, 8]); y = np.array([2, 2, 2, 2])
    x + y, x - y, x * y, x / y, x ** y; np.exp(x)
    X = np.arange(12).reshape(3, 4); Y = np.array([[2, 1, 4, 3], [1, 2, 3, 4], [4, 3, 2, 1]])
    np.concatenate([X, Y], axis=0), np.concatenate([X, Y], axis=1)
    X == Y; X.sum()
    a = np.arange(3).reshape(3, 1); b = np.arange(2).reshape(1, 2); a + b
    X[-1], X[1:3]
    assert np.concatenate([X, Y], axis=1).shape == (3, 8)
    X[1, 2] = 9; X[0:2, :] = 12
    assert X.asnumpy()[:, 2].tolist() == [12, 12, 10]
    before = id(Y); Y = Y + X; id(Y) == before
    Z = np.zeros_like(Y); Z[:] = X + Y
    before = id(X); X += Y; assert id(X) == before
    A = X.asnumpy(); B = np.array(A); type(A), type(B)
    a = np.array([3.5]); a, a.item(), float(a), int(a)

def test_2_3_linear_algebra():
    x = np.array(3.0); y = np.array(2.0); x + y, x * y, x / y, x ** y
    x = np.arange(4); x[3]; len(x); x.shape
    A = np.arange(20).reshape(5, 4); A.T
    B = np.array([[1, 2, 3], [2, 0, 4], [3, 4, 5]]); B == B.T
    X = np.arange(24).reshape(2, 3, 4)
    A = np.arange(20).reshape(5, 4); B = A.copy(); A, A + B; A * B
    a = 2; X = np.arange(24).reshape(2, 3, 4); a + X, (a * X).shape
    x = np.arange(4); x, x.sum(); A.shape, A.sum()
    A.sum(axis=0); A.sum(axis=1); assert float(A.sum(axis=[0, 1])) == 190; A.mean(), A.sum() / A.size
    A.mean(axis=0), A.sum(axis=0) / A.shape[0]
    sum_A = A.sum(axis=1, keepdims=True); A / sum_A
    onp.testing.assert_array_equal(A.cumsum(axis=0).asnumpy(), A.asnumpy().cumsum(axis=0))
    y = np.ones(4); np.dot(x, y); np.sum(x * y); np.dot(A, x); B = np.ones(shape=(4, 3)); np.dot(A, B)
    u = np.array([3, -4]); assert float(np.linalg.norm(u)) == 5; np.abs(u).sum(); np.linalg.norm(np.ones((4, 9)))

def test_2_4_calculus():
    x = np.arange(0, 3, 0.1)

def test_2_5_autograd():
    x = np.arange(4.0); x.attach_grad(); x.grad
    with autograd.record():
        y = 2 * np.dot(x, x)
    y.backward(); assert (x.grad == 4 * x).asnumpy().all()
    with autograd.record():
        y = x.sum()
    y.backward(); x.grad
    with autograd.record():
        y = x * x
    y.backward(); x.grad
    with autograd.record():
        y = x * x
        u = y.detach()
        z = u * x
    z.backward(); assert (x.grad == u).asnumpy().all()
    y.backward(); assert (x.grad == 2 * x).asnumpy().all()
    def f(a):
        b = a * 2
        while np.linalg.norm(b) < 1000:
            b = b * 2
        if b.sum() > 0:
            c = b
        else:
            c = 100 * b
        return c
    a = np.random.normal(); a.attach_grad()
    with autograd.record():
        d = f(a)
    d.backward(); assert abs(float(a.grad) - float(d / a)) <= 1e-5 * abs(float(a.grad))

def test_2_6_probability():
    fair_probs = [1.0 / 6] * 6
    np.random.multinomial(1, fair_probs); np.random.multinomial(10, fair_probs)
    counts = np.random.multinomial(1000, fair_probs).astype(np.float32); counts / 1000
    counts = np.random.multinomial(10, fair_probs, size=500)
    cum_counts = counts.astype(np.float32).cumsum(axis=0)
    estimates = cum_counts / cum_counts.sum(axis=1, keepdims=True)
    assert counts.shape == (500, 6) and float(counts.sum()) == 5000
    assert abs(float(estimates[-1, 0]) - 1 / 6) < 0.05

def test_3_2_linear_regression_from_scratch():
    def synthetic_data(w, b, num_examples):
        X = np.random.normal(0, 1, (num_examples, len(w)))
        y = np.dot(X, w) + b
        y += np.random.normal(0, 0.01, y.shape)
        return X, y.reshape((-1, 1))
    true_w = np.array([2, -3.4]); true_b = 4.2
    features, labels = synthetic_data(true_w, true_b, 1000)
    features[0], labels[0]
    def data_iter(batch_size, features, labels):
        num_examples = len(features)
        indices = list(range(num_examples))
        random.shuffle(indices)
        for i in range(0, num_examples, batch_size):
            batch_indices = np.array(indices[i: min(i + batch_size, num_examples)])
            yield features[batch_indices], labels[batch_indices]
    w = np.random.normal(0, 0.01, (2, 1)); b = np.zeros(1); w.attach_grad(); b.attach_grad()
    def linreg(X, w, b): return np.dot(X, w) + b
    def squared_loss(y_hat, y): return (y_hat - y.reshape(y_hat.shape)) ** 2 / 2
    lr = 0.03; num_epochs = 3; net = linreg; loss = squared_loss
    for epoch in range(num_epochs):
        for X, y in data_iter(10, features, labels):
            with autograd.record():
                l = loss(net(X, w, b), y)
            l.backward()
            sgd([w, b], lr, 10)
        train_l = loss(net(features, w, b), labels)
        print(f'epoch {epoch + 1}, loss {float(train_l.mean()):f}')
    print(f'error in estimating w: {true_w - w.reshape(true_w.shape)}')
    print(f'error in estimating b: {true_b - b}')
    assert float(train_l.mean()) < 1e-3
    assert float(np.abs(true_w - w.reshape(true_w.shape)).max()) < 0.02

def test_3_6_softmax_regression():
    X = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]); X.sum(0, keepdims=True), X.sum(1, keepdims=True)
    X = np.random.normal(0, 1, (2, 5)); X_prob = softmax(X); X_prob, X_prob.sum(1)
    y = np.array([0, 2]); y_hat = np.array([[0.1, 0.3, 0.6], [0.3, 0.2, 0.5]]); y_hat[[0, 1], y]
    onp.testing.assert_allclose(cross_entropy(y_hat, y).asnumpy(), -onp.log([0.1, 0.5]), rtol=1e-6)
    def accuracy(y_hat, y):
        if len(y_hat.shape) > 1 and y_hat.shape[1] > 1:
            y_hat = y_hat.argmax(axis=1)
        cmp = y_hat.astype(y.dtype) == y
        return float(cmp.astype(y.dtype).sum())
    accuracy(y_hat, y) / len(y)
    W = np.random.normal(0, 0.01, (784, 10)); b = np.zeros(10); W.attach_grad(); b.attach_grad()
    def net(X): return softmax(np.dot(X.reshape((-1, W.shape[0])), W) + b)
    Xb = np.random.uniform(size=(8, 1, 28, 28)); yb = np.array([1, 2, 3, 4, 5, 6, 7, 8])
    with autograd.record():
        l = cross_entropy(net(Xb), yb)
    l.backward(); sgd([W, b], 0.1, 8)
    labels_text = ['t-shirt', 'trouser', 'pullover', 'dress', 'coat', 'sandal', 'shirt', 'sneaker', 'bag', 'ankle boot']
    [labels_text[int(i)] for i in yb]

def test_4_1_mlp():
    x = np.arange(-8.0, 8.0, 0.1); x.attach_grad()
    with autograd.record():
        y = npx.relu(x)
    y.backward()
    with autograd.record():
        y = npx.sigmoid(x)
    y.backward()
    with autograd.record():
        y = np.tanh(x)
    y.backward()

def test_4_2_mlp_scratch():
    num_inputs, num_outputs, num_hiddens = 784, 10, 256
    W1 = np.random.normal(scale=0.01, size=(num_inputs, num_hiddens)); b1 = np.zeros(num_hiddens)
    W2 = np.random.normal(scale=0.01, size=(num_hiddens, num_outputs)); b2 = np.zeros(num_outputs)
    params = [W1, b1, W2, b2]
    for param in params: param.attach_grad()
    def relu(X): return np.maximum(X, 0)
    def net(X):
        X = X.reshape((-1, num_inputs)); H = relu(np.dot(X, W1) + b1); return np.dot(H, W2) + b2
    Xb = np.random.uniform(size=(8, 1, 28, 28)); yb = np.array([1, 2, 3, 4, 5, 6, 7, 8])
    with autograd.record():
        l = cross_entropy(softmax(net(Xb)), yb)
    l.backward()
    assert W1.grad.shape == W1.shape and float(np.abs(W2.grad).sum()) > 0

def test_4_4_polynomial():
    max_degree = 20; n_train, n_test = 100, 100
    true_w = np.zeros(max_degree); true_w[0:4] = np.array([5, 1.2, -3.4, 5.6])
    features = np.random.normal(size=(n_train + n_test, 1)); np.random.shuffle(features)
    poly_features = np.power(features, np.arange(max_degree).reshape(1, -1))
    for i in range(max_degree):
        poly_features[:, i] /= math.gamma(i + 1)
    labels = np.dot(poly_features, true_w); labels += np.random.normal(scale=0.1, size=labels.shape)

def test_4_5_weight_decay():
    def l2_penalty(w): return (w**2).sum() / 2
    true_w, true_b = np.ones((200, 1)) * 0.01, 0.05
    w = np.random.normal(scale=1, size=(200, 1)); w.attach_grad()
    with autograd.record():
        l = l2_penalty(w)
    l.backward(); np.linalg.norm(w)

def test_4_6_dropout():
    def dropout_layer(X, dropout):
        assert 0 <= dropout <= 1
        if dropout == 1: return np.zeros_like(X)
        if dropout == 0: return X
        mask = np.random.uniform(0, 1, X.shape) > dropout
        return mask.astype(np.float32) * X / (1.0 - dropout)
    X = np.arange(16).reshape(2, 8)
    print(dropout_layer(X, 0.), dropout_layer(X, 0.5), dropout_layer(X, 1.))
    autograd.is_training()
    with autograd.record():
        print(npx.dropout(X, 0.5))

def test_4_8_numerical_stability():
    M = np.random.normal(size=(4, 4))
    for i in range(100): M = np.dot(M, np.random.normal(size=(4, 4)))

def test_5_5_file_io(tmp_path):
    x = np.arange(4); npx.save(str(tmp_path / 'x-file'), x); x2 = npx.load(str(tmp_path / 'x-file'))
    assert x2.asnumpy().tolist() == [0, 1, 2, 3]
    y = np.zeros(4); npx.save(str(tmp_path / 'x-files'), [x, y]); x2, y2 = npx.load(str(tmp_path / 'x-files'))
    assert y2.asnumpy().tolist() == [0] * 4
    mydict = {'x': x, 'y': y}; npx.save(str(tmp_path / 'mydict'), mydict); mydict2 = npx.load(str(tmp_path / 'mydict'))
    assert sorted(mydict2) == ['x', 'y'] and mydict2['x'].asnumpy().tolist() == [0, 1, 2, 3]

def test_5_6_gpus():
    npx.cpu(), npx.gpu(), npx.gpu(1); npx.num_gpus()
    x = np.array([1, 2, 3]); x.ctx

def test_5_2_params():
    data = np.random.uniform(-10, 10, (3, 4)); data *= np.abs(data) >= 5
    data[:] += 1; data[0, 0] = 42; data[0]

