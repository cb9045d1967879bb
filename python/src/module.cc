// depengine._depengine: the extension module behind the `depengine` Python package.
#include <nanobind/stl/string.h>

#include "binding.h"
#include "gil.h"

namespace nb = nanobind;
using namespace depengine;
using namespace depengine::python;

NB_MODULE(_depengine, m) {
  m.doc() = "depengine: an MXNet-style dependency engine (see the depengine package)";
  // Objects still referenced at exit by pending failures (an exception held by an engine),
  // or by the ops of engines that live until the process ends, are leaked on purpose.
  nb::set_leak_warnings(false);

  nb::exception<Error>(m, "Error", PyExc_RuntimeError);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const PyOpError& e) {
      e.restore();
    }
  });

  nb::class_<Device>(m, "Device", "A device: npx.cpu() or npx.gpu(i).")
      .def_prop_ro("device_type", [](const Device& d) { return d.is_cpu() ? "cpu" : "gpu"; })
      .def_prop_ro("device_id", [](const Device& d) { return d.id; })
      .def("__eq__", [](const Device& a, nb::handle b) {
        return nb::isinstance<Device>(b) && a == nb::cast<Device>(b);
      })
      .def("__hash__", [](const Device& d) { return d.id * 2 + (d.is_gpu() ? 1 : 0); })
      .def("__reduce__", [](const Device& d) {
        return nb::make_tuple(nb::module_::import_("depengine._reduce").attr("device"),
                              nb::make_tuple(d.is_cpu() ? "cpu" : "gpu", d.id));
      })
      .def("__repr__", [](const Device& d) {
        return std::string(d.is_cpu() ? "cpu(" : "gpu(") + std::to_string(d.id) + ")";
      });

  bind_engine(m);
  bind_graph(m);
  nb::module_ np = m.def_submodule("np", "mxnet.np: arrays pushed to the engine");
  nb::module_ npx = m.def_submodule("npx", "mxnet.npx: waitall, devices, set_np");
  bind_array(np);
  bind_np(np, npx);
  bind_np_more(np, npx);
  bind_array_segments(npx);
  bind_cached_op(npx);
  bind_np_nn(npx);
  bind_optim(m);
  bind_gluon_ops(m);
  bind_data(m);
  bind_autograd(m, np);
  bind_memory(npx);

  m.def("_close_python",
        [] {
          begin_exit();
          wait_registered_engines();
          close_python();
        },
        "atexit: waits for every engine Python used, then stops workers from entering Python.");
  init_waits();
  register_engine(&Engine::get());
}
