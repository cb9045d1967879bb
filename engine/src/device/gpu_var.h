// The per-var slot for GPU completion state (device/gpu_sync.h). Kept apart so that op.h can
// hold it without seeing the stream layer.
#pragma once

#include <atomic>

namespace depengine::detail {

struct GpuVarState;

// Null until the first stream op uses the var; then made once (several GPU readers may race
// to make it) and kept until the var dies.
class GpuVarSlot {
 public:
  GpuVarSlot() = default;
  ~GpuVarSlot();
  GpuVarSlot(const GpuVarSlot&) = delete;
  GpuVarSlot& operator=(const GpuVarSlot&) = delete;

  GpuVarState* get() const noexcept { return p_.load(std::memory_order_acquire); }
  GpuVarState& get_or_make();

 private:
  std::atomic<GpuVarState*> p_{nullptr};
};

}  // namespace depengine::detail
