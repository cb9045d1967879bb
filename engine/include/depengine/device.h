// depengine/device.h — where an operation runs (device) and on which queue (lane).
#pragma once

#include <cstdint>
#include <string>

namespace depengine {

// A device: the host CPU pool or one GPU. Cheap value type.
//
//   depengine::Device d = depengine::Device::gpu(1);
//   if (d.is_gpu()) { ... }
//
// All members are thread-safe.
struct Device {
  enum class Kind : std::uint8_t { cpu, gpu };

  Kind kind = Kind::cpu;
  int id = 0;

  static constexpr Device cpu() noexcept { return {Kind::cpu, 0}; }
  static constexpr Device gpu(int i) noexcept { return {Kind::gpu, i}; }

  constexpr bool is_cpu() const noexcept { return kind == Kind::cpu; }
  constexpr bool is_gpu() const noexcept { return kind == Kind::gpu; }

  // Number of CUDA devices usable by this process: 0 when depengine was built without
  // CUDA, when no driver is loaded, or when no device is present. Never throws.
  static int gpu_count() noexcept;

  // "cpu" or "gpu(1)".
  std::string str() const;

  friend constexpr bool operator==(const Device&, const Device&) = default;
};

// The queue an operation is placed on within its device. On a GPU each lane is a stream;
// on the CPU, `priority` ops jump ahead of waiting ops and the other lanes share one pool.
enum class Lane : std::uint8_t { compute, copy_to_device, copy_from_device, priority };

inline constexpr int kLaneCount = 4;

// "compute", "copy_to_device", "copy_from_device" or "priority".
const char* lane_name(Lane lane) noexcept;

}  // namespace depengine
