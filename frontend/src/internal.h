// Frontend internals shared by ndarray.cc, ops.cc, select.cc and print.cc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "depengine/ndarray.h"

namespace depengine::detail {

// Array storage: 64-byte aligned floats, counted in nd::memory_stats(). `elements` is the
// count of a shape that passed checked_size.
float* allocate_storage(std::size_t elements);
void free_storage(float* p, std::size_t elements) noexcept;

// Throws Error "<op>: <device> ..." unless `d` can hold arrays of `e`: the CPU, one of the
// engine's simulated GPUs, or a CUDA device of a CUDA build. True for a simulated GPU.
bool check_device(const Engine& e, Device d, const char* op);

// A GPU array's storage as ops see it when they run. On a CUDA device `data` is set by the
// stream-ordered allocation op that the Chunk pushes first (so every later op, ordered
// after it by the var, reads it set); on a simulated GPU it is host memory set at once.
struct DeviceBuffer {
  float* data = nullptr;
};

// One storage block and the var that orders accesses to it. Views (reshape) share it.
// Its destructor pushes the var's deletion, which frees the storage once every op
// pushed before on the var has finished: ops capture raw pointers, never the Chunk.
struct Chunk {
  // Storage on `device`. A GPU must exist: one of the engine's simulated GPUs, or a CUDA
  // device of a CUDA build; otherwise throws Error naming it (and nothing is pushed).
  Chunk(Engine& e, std::size_t elements, Device device = Device::cpu());
  ~Chunk();
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;

  Engine* const engine;
  const Device device;
  // A GPU of the engine's host-simulated device: its storage is host memory.
  const bool simulated;
  const Var var;
  const std::size_t size;
  // Host storage: the CPU's or a simulated GPU's; nullptr for memory on a CUDA device.
  float* const data;
  // GPU arrays only (nullptr on the CPU): where their ops find the storage.
  DeviceBuffer* const buffer;
  // The var has its reduction hooks (nd::accumulate sets them on first use).
  std::atomic<bool> reduction_set{false};
  // Counts the in-place writes pushed to this storage (autograd::detail::bump_version), so
  // that a gradient whose saved input was overwritten since it was recorded is refused.
  std::atomic<std::uint64_t> version{0};
  // Made by a comparison (1.0f / 0.0f standing in for bool) and not written in place since:
  // it indexes as a boolean mask (NDArray::is_mask).
  std::atomic<bool> is_mask{false};
};

// An array's storage as captured by an op: resolved when the op runs (see DeviceBuffer).
struct Ptr {
  float* host = nullptr;
  DeviceBuffer* buffer = nullptr;
  float* get() const noexcept { return buffer ? buffer->data : host; }
};
inline Ptr ptr(const Chunk& c) noexcept { return {c.data, c.buffer}; }

// A counter-based generator's state: read and written only by ops that declare its
// Generator's var.
struct Rng {
  std::uint64_t key = 0;
  std::uint64_t counter = 0;
};

// A generator: its state and the var that orders the ops reading and advancing it. Shared
// by its Context and by the segments (nd::record) whose random ops use it, so that a
// segment replays after the EngineScope it was recorded under has ended. The destructor
// pushes the var's deletion, which frees the state after the last op on it.
struct Generator {
  explicit Generator(Engine& e);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  Engine* const engine;
  const Var var;
  Rng* const rng;  // freed by var's deferred delete
};

// What the frontend pushes to on a thread: an engine and its generator.
struct Context {
  explicit Context(Engine& e);
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Engine* const engine;
  const std::shared_ptr<Generator> generator;
  // The context that was current on the thread when this one's EngineScope began: the
  // thread's scopes form a chain from its innermost one.
  Context* previous = nullptr;
};

// The innermost EngineScope's context on this thread, else the one on Engine::get().
Context& current_context();

struct ArrayInternals {
  // A new, uninitialized array on `e` (and `device`). Checks `shape` first (checked_size,
  // naming `op`), so a shape that does not fit throws before anything is allocated.
  static NDArray make(Engine& e, Shape shape, const char* op);
  static NDArray make(Engine& e, Shape shape, Device device, const char* op);
  static NDArray view(const NDArray& a, Shape shape) { return NDArray(a.chunk_, std::move(shape)); }
  // An array over `chunk` as given (nd::CachedOp hands out its outputs through an aliasing
  // pointer whose owner tells whether any handle to them is still alive).
  static NDArray wrap(std::shared_ptr<Chunk> chunk, Shape shape) {
    return NDArray(std::move(chunk), std::move(shape));
  }
  static Chunk* chunk(const NDArray& a) noexcept { return a.chunk_.get(); }
  static const std::shared_ptr<Chunk>& shared_chunk(const NDArray& a) noexcept { return a.chunk_; }
  // Autograd history (autograd.cc).
  static const std::shared_ptr<autograd::detail::Node>& node(const NDArray& a) noexcept {
    return a.node_;
  }
  static std::uint32_t output(const NDArray& a) noexcept { return a.output_; }
  static void set_history(NDArray& a, std::shared_ptr<autograd::detail::Node> node,
                          std::uint32_t output) noexcept {
    a.node_ = std::move(node);
    a.output_ = output;
  }
};

// nd::record (record.cc): while set on this thread, every chunk made (ArrayInternals::make)
// or used by an op (require) is kept here, so that a segment's arrays outlive its region.
inline thread_local std::vector<std::shared_ptr<Chunk>>* t_recorded_chunks = nullptr;
// Likewise the generators that the region's random ops use.
inline thread_local std::vector<std::shared_ptr<Generator>>* t_recorded_generators = nullptr;

// The generator of `cx`, for an op about to be pushed (kept by nd::record when recording).
Generator& use_generator(const Context& cx);

// The element count of `shape`, checked: the one check every shape made by the frontend
// passes (ArrayInternals::make, reshape, array). Throws Error "<op>: shape (...) ..." when
// the shape has more than kMaxNdim dimensions, when its element count does not fit in
// size_t, or when the product of its non-zero dimensions is more than ops::kMaxFloats (its
// bytes would pass PTRDIFF_MAX). A shape that passed it has every product of some of its
// dimensions — strides, loop bounds, outer and inner sizes — in size_t, and its bytes too.
std::size_t checked_size(const Shape& shape, const char* op);

// The element count of a shape that passed checked_size (an array's).
std::size_t shape_size(const Shape& shape) noexcept;

// ops::check_gemm for the product `op` of arrays of shapes `a` and `b`, at push time: its
// Error (a size beyond the int that BLAS takes) also names the two shapes.
void check_gemm(const char* op, const Shape& a, const Shape& b, std::size_t m, std::size_t n,
                std::size_t k, std::size_t lda, std::size_t ldb, std::size_t ldc);

// numpy's broadcast shape of `a` and `b`, or nothing when they are incompatible.
std::optional<Shape> broadcast_shape(const Shape& a, const Shape& b);

// The strides of `in` (row-major, aligned right to `out`), 0 where it is broadcast.
std::vector<std::size_t> broadcast_strides(const Shape& out, const Shape& in);

// The chunk of `a`; throws Error "<op>: ..." for a null array.
Chunk& require(const NDArray& a, const char* op);

// Writes numpy's repr of `values` (shape `shape`) to `out`.
std::string format_array(const float* values, const Shape& shape);

}  // namespace depengine::detail
