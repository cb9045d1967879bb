// depengine._depengine._gluon: the fused, differentiable layer ops of depengine/layer_ops.h
// that gluon's Dense and SoftmaxCrossEntropyLoss call on CPU arrays.
#include "binding.h"
#include "depengine/layer_ops.h"

namespace depengine::python {

void bind_gluon_ops(nb::module_& m) {
  using namespace nb::literals;
  nb::module_ g = m.def_submodule("_gluon", "Fused layer ops (depengine/layer_ops.h)");
  g.def("fully_connected",
        [](const NDArray& x, const NDArray& weight, nb::handle bias, bool relu) {
          const NDArray b = bias.is_none() ? NDArray() : nb::cast<NDArray>(bias);
          return frontend_call(x.engine(), [&] { return nd::fully_connected(x, weight, b, relu); });
        },
        "x"_a, "weight"_a, "bias"_a.none() = nb::none(), "relu"_a = false,
        "relu?(x · weightᵀ + bias) in one op; x (m, k), weight (n, k), bias (n,) or None.");
  g.def("softmax_cross_entropy",
        [](const NDArray& logits, const NDArray& labels, bool from_logits) {
          return frontend_call(logits.engine(), [&] {
            return nd::softmax_cross_entropy_rows(logits, labels, from_logits);
          });
        },
        "logits"_a, "labels"_a, "from_logits"_a = false,
        "Per-row -log softmax(logits)[label]; a label out of range fails at the blocker.");
}

}  // namespace depengine::python
