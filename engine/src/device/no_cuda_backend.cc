// The CUDA backend of a build without CUDA: no devices, and a clear error for any use.
#include "depengine/error.h"
#include "device/device_backend.h"

namespace depengine::detail {
namespace {

class NoCudaBackend final : public DeviceBackend {
 public:
  int device_count() const noexcept override { return 0; }
  std::string name() const override { return "cuda (not built)"; }
  std::unique_ptr<DeviceStream> make_stream(int device, Lane lane) override {
    check_lane(device, lane);
    fail(device);
  }
  std::unique_ptr<StreamEvent> make_event(int device) override { fail(device); }

 private:
  [[noreturn]] static void fail(int device) {
    throw Error(Device::gpu(device).str() +
                ": depengine was built without CUDA (set DEPENGINE_SIM_GPUS to use "
                "host-simulated GPUs)");
  }
};

}  // namespace

std::unique_ptr<DeviceBackend> make_cuda_backend() { return std::make_unique<NoCudaBackend>(); }

}  // namespace depengine::detail

int depengine::Device::gpu_count() noexcept { return 0; }
