// depengine.autograd (the flags and the backward walk of depengine/autograd.h) and the
// ndarray's autograd members: attach_grad, grad, backward, detach.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "binding.h"
#include "depengine/autograd.h"

namespace depengine::python {
namespace {

autograd::GradReq grad_req(const std::string& req, const char* fn) {
  if (req == "write") return autograd::GradReq::write;
  if (req == "add") return autograd::GradReq::add;
  if (req == "null") return autograd::GradReq::null;
  throw nb::value_error((std::string(fn) + ": grad_req must be 'write', 'add' or 'null', got '" +
                         req + "'").c_str());
}

// An ndarray or a list/tuple of them (`what` names the argument in errors).
std::vector<NDArray> arrays(nb::handle h, const char* fn, const char* what, bool none_ok) {
  std::vector<NDArray> out;
  auto one = [&](nb::handle x) {
    if (none_ok && x.is_none()) {
      out.emplace_back();
      return;
    }
    if (!nb::isinstance<NDArray>(x)) {
      throw nb::type_error((std::string(fn) + ": " + what + " must be ndarrays, got " +
                            Py_TYPE(x.ptr())->tp_name).c_str());
    }
    out.push_back(nb::cast<NDArray>(x));
  };
  if (nb::isinstance<NDArray>(h)) {
    one(h);
  } else if (nb::isinstance<nb::list>(h) || nb::isinstance<nb::tuple>(h)) {
    for (nb::handle x : h) one(x);
  } else {
    throw nb::type_error((std::string(fn) + ": " + what +
                          " must be an ndarray or a list of ndarrays, got " +
                          Py_TYPE(h.ptr())->tp_name).c_str());
  }
  return out;
}

// Runs a walk: depengine.Error for what the walk refuses; the GIL released while it pushes
// to an engine whose pushes may block.
template <class F>
decltype(auto) walk_call(const std::vector<NDArray>& heads, F&& f) {
  check_not_exiting();
  const bool release = !heads.empty() && heads[0].defined() && push_may_block(heads[0].engine());
  return maybe_released(release, std::forward<F>(f));
}

}  // namespace

void bind_autograd(nb::module_& m, nb::module_& np) {
  using namespace nb::literals;
  nb::module_ ag = m.def_submodule("autograd", "mxnet.autograd: record, backward, grad");
  ag.def("is_recording", &autograd::is_recording, "Whether this thread records ops for autograd.");
  ag.def("is_training", &autograd::is_training, "Whether this thread is in training mode.");
  ag.def("set_recording", &autograd::set_recording, "is_recording"_a,
         "Sets this thread's recording flag; returns the previous one.");
  ag.def("set_training", &autograd::set_training, "train_mode"_a,
         "Sets this thread's training flag; returns the previous one.");
  ag.def("backward",
         [](nb::handle heads, nb::handle head_grads, bool retain_graph, bool train_mode) {
           const std::vector<NDArray> h = arrays(heads, "backward", "heads", false);
           const std::vector<NDArray> g =
               head_grads.is_none() ? std::vector<NDArray>{}
                                    : arrays(head_grads, "backward", "head_grads", true);
           walk_call(h, [&] { autograd::backward(h, g, retain_graph, train_mode); });
         },
         "heads"_a, "head_grads"_a = nb::none(), "retain_graph"_a = false, "train_mode"_a = true,
         "Pushes the gradients of heads into the gradient buffers of the variables they were "
         "recorded from; returns at once.");
  ag.def("grad",
         [](nb::handle heads, nb::handle variables, nb::handle head_grads, nb::handle retain_graph,
            bool create_graph, bool train_mode) -> nb::object {
           if (create_graph) {
             throw nb::type_error(
                 "grad: create_graph=True is not supported (no higher-order gradients)");
           }
           const std::vector<NDArray> h = arrays(heads, "grad", "heads", false);
           const std::vector<NDArray> v = arrays(variables, "grad", "variables", false);
           const std::vector<NDArray> g =
               head_grads.is_none() ? std::vector<NDArray>{}
                                    : arrays(head_grads, "grad", "head_grads", true);
           const bool retain = retain_graph.is_none() ? create_graph : nb::cast<bool>(retain_graph);
           std::vector<NDArray> out =
               walk_call(h, [&] { return autograd::grad(h, v, g, retain, train_mode); });
           if (nb::isinstance<NDArray>(variables)) return nb::cast(std::move(out[0]));
           return nb::cast(std::move(out));
         },
         "heads"_a, "variables"_a, "head_grads"_a = nb::none(), "retain_graph"_a = nb::none(),
         "create_graph"_a = false, "train_mode"_a = true,
         "The gradients of heads with respect to variables, as new arrays.");
  ag.def("mark_variables",
         [](nb::handle variables, nb::handle gradients, nb::handle grad_reqs) {
           std::vector<NDArray*> vars;
           auto collect = [&](nb::handle x) {
             if (!nb::isinstance<NDArray>(x)) {
               throw nb::type_error("mark_variables: variables must be ndarrays");
             }
             vars.push_back(&nb::cast<NDArray&>(x));
           };
           if (nb::isinstance<NDArray>(variables)) {
             collect(variables);
           } else {
             for (nb::handle x : variables) collect(x);
           }
           const std::vector<NDArray> grads = arrays(gradients, "mark_variables", "gradients", false);
           if (grads.size() != vars.size()) {
             throw nb::value_error("mark_variables: one gradient buffer per variable is needed");
           }
           std::vector<std::string> reqs;
           if (nb::isinstance<nb::str>(grad_reqs)) {
             reqs.assign(vars.size(), nb::cast<std::string>(grad_reqs));
           } else {
             for (nb::handle r : grad_reqs) reqs.push_back(nb::cast<std::string>(r));
           }
           if (reqs.size() != vars.size()) {
             throw nb::value_error("mark_variables: one grad_req per variable is needed");
           }
           for (std::size_t i = 0; i < vars.size(); ++i) {
             if (grads[i].shape() != vars[i]->shape()) {
               throw nb::value_error(("mark_variables: gradient " + std::to_string(i) +
                                      " has shape " + shape_str(grads[i].shape()) +
                                      ", its variable " + shape_str(vars[i]->shape())).c_str());
             }
             frontend_call(vars[i]->engine(), [&] {
               autograd::mark_variable(*vars[i], grad_req(reqs[i], "mark_variables"), grads[i]);
             });
           }
         },
         "variables"_a, "gradients"_a, "grad_reqs"_a = "write",
         "Makes each array a variable whose gradient goes into the given buffer.");

  // The ndarray's members, added to the class that bind_array made.
  nb::handle cls = np.attr("ndarray");
  nb::setattr(cls, "attach_grad",
              nb::cpp_function(
                  [](NDArray& a, const std::string& req) {
                    const autograd::GradReq r = grad_req(req, "attach_grad");
                    frontend_call(a.engine(), [&] { a.attach_grad(r); });
                  },
                  nb::scope(cls), nb::name("attach_grad"), nb::is_method(),
                  "grad_req"_a = "write",
                  "Makes this array a variable: its gradient buffer (grad) is zeros of its shape."));
  nb::setattr(cls, "backward",
              nb::cpp_function(
                  [](const NDArray& a, nb::handle out_grad, bool retain_graph, bool train_mode) {
                    std::vector<NDArray> g;
                    if (!out_grad.is_none()) g = arrays(out_grad, "backward", "out_grad", false);
                    walk_call({a}, [&] { autograd::backward({a}, g, retain_graph, train_mode); });
                  },
                  nb::scope(cls), nb::name("backward"), nb::is_method(), "out_grad"_a = nb::none(),
                  "retain_graph"_a = false, "train_mode"_a = true,
                  "Pushes the gradient of this array into its variables' gradient buffers."));
  nb::setattr(cls, "detach",
              nb::cpp_function([](const NDArray& a) { return a.detach(); }, nb::scope(cls),
                               nb::name("detach"), nb::is_method(),
                               "The same storage without autograd history."));
  nb::object property = nb::module_::import_("builtins").attr("property");
  nb::setattr(cls, "grad",
              property(nb::cpp_function(
                  [](const NDArray& a) -> nb::object {
                    NDArray g = a.grad();
                    if (!g.defined()) return nb::none();
                    return nb::cast(std::move(g));
                  },
                  nb::is_method(), "The gradient buffer (None until attach_grad).")));
}

}  // namespace depengine::python
