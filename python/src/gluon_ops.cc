// depengine._depengine._gluon: the fused, differentiable layer ops of depengine/layer_ops.h
// that gluon's Dense and SoftmaxCrossEntropyLoss call. The ops take CPU arrays; for arrays
// elsewhere each call returns None and gluon composes np ops instead. The device check is
// made here rather than in Python (three `ctx` objects per Dense call cost a few µs of the
// Python thread, per layer and step).
#include "binding.h"
#include "depengine/layer_ops.h"
#include "depengine/nn.h"

namespace depengine::python {
namespace {

bool on_cpu(const NDArray& a) { return !a.defined() || a.device().is_cpu(); }

}  // namespace

void bind_gluon_ops(nb::module_& m) {
  using namespace nb::literals;
  nb::module_ g = m.def_submodule("_gluon", "Fused layer ops (depengine/layer_ops.h)");
  g.def("fully_connected",
        [](const NDArray& x, const NDArray& weight, nb::handle bias, bool relu) -> nb::object {
          const NDArray b = bias.is_none() ? NDArray() : nb::cast<NDArray>(bias);
          if (!on_cpu(x) || !on_cpu(weight) || !on_cpu(b)) return nb::none();
          return nb::cast(
              frontend_call(x.engine(), [&] { return nd::fully_connected(x, weight, b, relu); }));
        },
        "x"_a, "weight"_a, "bias"_a.none() = nb::none(), "relu"_a = false,
        "relu?(x · weightᵀ + bias) in one op; x (m, k), weight (n, k), bias (n,) or None. None "
        "when an array is not on the CPU.");
  g.def("softmax_cross_entropy",
        [](const NDArray& logits, const NDArray& labels, bool from_logits) -> nb::object {
          if (!on_cpu(logits) || !on_cpu(labels)) return nb::none();
          return nb::cast(frontend_call(logits.engine(), [&] {
            return nd::softmax_cross_entropy_rows(logits, labels, from_logits);
          }));
        },
        "logits"_a, "labels"_a, "from_logits"_a = false,
        "Per-row -log softmax(logits)[label], shape (rows,); a label out of range fails at the "
        "blocker. None when an array is not on the CPU.");
  // gluon.metric's running totals: one op per update and no blocker.
  g.def("add_count_correct",
        [](NDArray& total, const NDArray& logits, const NDArray& labels) {
          if (!on_cpu(total) || !on_cpu(logits) || !on_cpu(labels)) return false;
          frontend_call(total.engine(), [&] {
            nd::add_count_correct(total, logits, labels);
            return 0;
          });
          return true;
        },
        "total"_a, "logits"_a, "labels"_a,
        "total += the number of rows of logits (m, n) whose argmax equals labels (m,), in place "
        "(one op). False, and nothing pushed, when an array is not on the CPU.");
  g.def("add_sum",
        [](NDArray& total, const NDArray& x) {
          if (!on_cpu(total) || !on_cpu(x)) return false;
          frontend_call(total.engine(), [&] {
            nd::add_sum(total, x);
            return 0;
          });
          return true;
        },
        "total"_a, "x"_a,
        "total += the sum of x's elements (in double, in index order), in place (one op). False, "
        "and nothing pushed, when an array is not on the CPU.");
}

}  // namespace depengine::python
