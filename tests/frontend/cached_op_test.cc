// nd::CachedOp (depengine/cached_op.h): training steps through a replayed forward give the
// same bits as the eager steps (parameters, gradients, dropout masks) on the naive engine and
// the threaded one with 1, 2 and 4 workers, with the outputs copied or handed out as they
// are; grad_req add; retain_graph and busy(); held() and release(); a gradient for an input;
// the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "depengine/autograd.h"
#include "depengine/cached_op.h"
#include "depengine/ndarray.h"
#include "depengine/ndarray_ops.h"
#include "depengine/nn.h"

namespace depengine {
namespace {

struct Net {
  NDArray w1, b1, w2;
};

Net make_net(autograd::GradReq req) {
  nd::seed(5);
  Net n{nd::random_normal({6, 8}, 0.0f, 0.5f), nd::random_normal({8}, 0.0f, 0.5f),
        nd::random_normal({8, 3}, 0.0f, 0.5f)};
  n.w1.attach_grad(req);
  n.b1.attach_grad(req);
  n.w2.attach_grad(req);
  return n;
}

// relu(x·w1 + b1) with dropout, then ·w2: broadcasting (b1), a random op, two uses of h.
std::vector<NDArray> forward(const NDArray& x, const Net& n) {
  const NDArray h = nd::dropout(nd::relu(nd::dot(x, n.w1) + n.b1), 0.3f);
  return {nd::dot(h, n.w2) + nd::mean(h * h)};
}

NDArray batch(int step) {
  std::vector<float> v(4 * 6);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7 + step * 3) % 11) / 5.0f - 1.0f;
  return nd::array(v, {4, 6});
}

struct Result {
  std::vector<std::vector<float>> params, grads;
  std::size_t replays = 0;
};

// `steps` SGD steps; cached: through one CachedOp recorded at the first step, its outputs
// copied or not.
Result train(Engine& e, bool cached, autograd::GradReq req, int steps, bool copy_outputs = true) {
  EngineScope use(e);
  Net n = make_net(req);
  nd::seed(9);
  nd::CachedOp op;
  Result r;
  for (int s = 0; s < steps; ++s) {
    const NDArray x = batch(s);
    NDArray loss;
    {
      autograd::RecordScope record;
      std::vector<NDArray> y;
      if (!cached) {
        y = forward(x, n);
      } else {
        if (!op) {
          op = nd::CachedOp::record("mlp", {nd::copy(x)}, {false}, {n.w1, n.b1, n.w2},
                                    [&](const std::vector<NDArray>& in) { return forward(in[0], n); });
        }
        y = op({x}, {n.w1, n.b1, n.w2}, copy_outputs);
      }
      loss = nd::mean(nd::square(y[0]));
    }
    loss.backward();
    for (NDArray* w : {&n.w1, &n.b1, &n.w2}) nd::sgd_update(*w, w->grad(), 0.01f);
  }
  for (const NDArray* w : {&n.w1, &n.b1, &n.w2}) {
    r.params.push_back(w->to_vector());
    r.grads.push_back(w->grad().to_vector());
  }
  r.replays = op.replays();
  return r;
}

struct EngineKind {
  const char* type;
  int workers;
};

class CachedOpTraining : public ::testing::TestWithParam<EngineKind> {
 protected:
  std::unique_ptr<Engine> make() const {
    return Engine::create(GetParam().type, {.cpu_threads = GetParam().workers});
  }
};

TEST_P(CachedOpTraining, SameBitsAsEagerAfterSteps) {
  for (autograd::GradReq req : {autograd::GradReq::write, autograd::GradReq::add}) {
    auto e1 = make();
    auto e2 = make();
    auto e3 = make();
    const Result eager = train(*e1, false, req, 5);
    const Result cached = train(*e2, true, req, 5);
    const Result uncopied = train(*e3, true, req, 5, /*copy_outputs=*/false);
    EXPECT_EQ(cached.replays, 4u);
    EXPECT_EQ(uncopied.replays, 4u);
    ASSERT_EQ(eager.params.size(), cached.params.size());
    for (std::size_t i = 0; i < eager.params.size(); ++i) {
      for (float v : eager.params[i]) ASSERT_TRUE(std::isfinite(v));  // NaN != NaN
      // Bitwise: the same float values, not merely close ones.
      EXPECT_EQ(eager.params[i], cached.params[i]) << "parameter " << i;
      EXPECT_EQ(eager.grads[i], cached.grads[i]) << "gradient " << i;
      EXPECT_EQ(eager.params[i], uncopied.params[i]) << "parameter " << i;
      EXPECT_EQ(eager.grads[i], uncopied.grads[i]) << "gradient " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, CachedOpTraining,
                         ::testing::Values(EngineKind{"naive", 0}, EngineKind{"threaded", 1},
                                           EngineKind{"threaded", 2}, EngineKind{"threaded", 4}),
                         [](const auto& param) {
                           return std::string(param.param.type) + std::to_string(param.param.workers);
                         });

TEST(CachedOp, InputGradientAndResidualUseMatchEager) {
  // x has a history (a variable) and is also used outside the cached op (x + f(x)): the
  // contributions to x.grad are summed in the eager order.
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  EngineScope use(*e);
  NDArray w = nd::random_normal({5, 5});
  w.attach_grad();
  auto f = [&](const NDArray& x) { return nd::tanh(nd::dot(x, w)) + nd::square(x); };
  auto run = [&](bool cached) {
    NDArray x = nd::random_normal({3, 5});
    x.attach_grad();
    nd::CachedOp op;
    std::vector<float> gx, gw;
    for (int s = 0; s < 2; ++s) {
      NDArray loss;
      {
        autograd::RecordScope record;
        NDArray y;
        if (cached) {
          if (!op) {
            op = nd::CachedOp::record("f", {nd::copy(x)}, {true}, {w},
                                      [&](const std::vector<NDArray>& in) {
                                        return std::vector<NDArray>{f(in[0])};
                                      });
          }
          y = op({x}, {w})[0];
        } else {
          y = f(x);
        }
        loss = nd::sum((x + y) * (x + y));
      }
      loss.backward();
    }
    return std::pair{x.grad().to_vector(), w.grad().to_vector()};
  };
  nd::seed(3);
  const auto eager = run(false);
  nd::seed(3);
  const auto cached = run(true);
  EXPECT_EQ(eager.first, cached.first);
  EXPECT_EQ(eager.second, cached.second);
}

TEST(CachedOp, BusyUntilBackwardAndRetainGraph) {
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  EngineScope use(*e);
  NDArray w = nd::ones({2, 2});
  w.attach_grad();
  NDArray x = nd::ones({1, 2});
  nd::CachedOp op = nd::CachedOp::record("g", {nd::copy(x)}, {false}, {w},
                                         [&](const std::vector<NDArray>& in) {
                                           return std::vector<NDArray>{nd::dot(in[0], w)};
                                         });
  EXPECT_FALSE(op.busy());  // no call yet
  NDArray loss;
  {
    autograd::RecordScope record;
    loss = nd::sum(op({x}, {w})[0]);
  }
  EXPECT_TRUE(op.busy());
  loss.backward(NDArray(), /*retain_graph=*/true);
  EXPECT_TRUE(op.busy());  // a second backward still reads the saved arrays
  loss.backward();
  EXPECT_FALSE(op.busy());
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{1, 1, 1, 1}));
  // Outside autograd no node is made: never busy.
  (void)op({x}, {w});
  EXPECT_FALSE(op.busy());
  EXPECT_EQ(op.replays(), 1u);
}

// An output handed out without a copy holds the op while any handle to it (a copy of the
// handle, a reshape) lives; a call then is refused rather than overwriting it. release()
// gives the caller's own handles a copy of their own, history kept.
TEST(CachedOp, OutputsWithoutACopyHoldTheOpUntilDroppedOrReleased) {
  auto e = Engine::create("threaded", {.cpu_threads = 2});
  EngineScope use(*e);
  NDArray w = nd::ones({2, 2});
  w.attach_grad();
  const NDArray x = nd::ones({1, 2});
  nd::CachedOp op = nd::CachedOp::record("blk", {nd::copy(x)}, {false}, {w},
                                         [&](const std::vector<NDArray>& in) {
                                           return std::vector<NDArray>{nd::dot(in[0], w)};
                                         });
  NDArray y = op({x}, {w}, /*copy_outputs=*/false)[0];
  EXPECT_TRUE(op.held());
  NDArray flat = y.reshape({2});
  y = NDArray();
  EXPECT_TRUE(op.held());  // the reshape shares the storage
  try {
    (void)op({x * 2.0f}, {w});
    FAIL() << "a held op replayed";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("blk: called while an output of its previous call"),
              std::string::npos)
        << err.what();
  }
  EXPECT_FALSE(op.release({}));  // the reshape is a handle release() was not given
  EXPECT_EQ(flat.to_vector(), (std::vector<float>{2, 2}));
  flat = NDArray();
  EXPECT_FALSE(op.held());

  NDArray z, loss;
  {
    autograd::RecordScope record;
    z = op({x * 2.0f}, {w}, false)[0];
  }
  NDArray kept = z;  // two handles, both given to release()
  EXPECT_TRUE(op.release({&z, &kept}));
  EXPECT_FALSE(op.held());
  {
    autograd::RecordScope record;
    loss = nd::sum(z);
  }
  loss.backward();  // the history went with the copy
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{2, 2, 2, 2}));
  (void)op({x}, {w}, false);  // a replay: what z and kept hold is theirs now
  EXPECT_EQ(z.to_vector(), (std::vector<float>{4, 4}));
  EXPECT_EQ(kept.to_vector(), (std::vector<float>{4, 4}));
}

TEST(CachedOp, Errors) {
  auto e = Engine::create("naive");
  EngineScope use(*e);
  NDArray w = nd::ones({2, 2});
  w.attach_grad();
  NDArray x = nd::ones({1, 2});
  nd::CachedOp op = nd::CachedOp::record("dense0", {nd::copy(x)}, {false}, {w},
                                         [&](const std::vector<NDArray>& in) {
                                           return std::vector<NDArray>{nd::dot(in[0], w)};
                                         });
  try {
    (void)op({nd::ones({3, 2})}, {w});
    FAIL() << "a wrong input shape was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("dense0: input 0 has shape (3, 2), the op was recorded "
                                           "with (1, 2)"),
              std::string::npos)
        << err.what();
  }
  EXPECT_THROW((void)op({x}, {}), Error);
  // A forward that reads an array with a history that is not a parameter.
  NDArray v = nd::ones({2, 2});
  v.attach_grad();
  NDArray hidden;
  {
    autograd::RecordScope record;
    hidden = v * 2.0f;
  }
  try {
    (void)nd::CachedOp::record("dense1", {nd::copy(x)}, {false}, {w},
                               [&](const std::vector<NDArray>& in) {
                                 return std::vector<NDArray>{nd::dot(in[0], w + hidden)};
                               });
    FAIL() << "an array with a history outside the parameters was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("dense1: the forward reads an array with autograd "
                                           "history"),
              std::string::npos)
        << err.what();
  }
  nd::CachedOp none;
  EXPECT_THROW((void)none({}, {}), Error);
}

}  // namespace
}  // namespace depengine
