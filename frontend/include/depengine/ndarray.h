// depengine/ndarray.h — NDArray: float32 arrays whose operations are pushed to the
// dependency engine and return at once, as in MXNet's mxnet.np.
//
//   #include <depengine/ndarray.h>
//   using namespace depengine;
//   NDArray a = nd::random_normal({1000, 1000}, 0.f, 1.f);
//   NDArray b = nd::dot(a, a);          // pushed; returns before the product is computed
//   NDArray c = a + b * 2.0f;
//   c += 1.0f;                          // in place: c's var is read and written
//   float s = nd::sum(c).item();        // a blocker: waits for what it reads
//   std::cout << c;                     // a blocker too; prints like numpy's repr
//   depengine::waitall();
//
// An NDArray is a handle: copies share storage (as in MXNet), `copy()` makes a new array.
// Each storage has one engine var; an op reads its inputs' vars and writes its output's.
// Storage is freed by a deferred delete_var, so an array may be dropped while ops that
// use it are still pending.
//
// Which engine: creation functions (zeros, random_normal, array, ...) push to the current
// engine of the calling thread — Engine::get(), or the engine of the innermost live
// EngineScope on that thread. Every other op pushes to the engine its inputs live on.
//
// Errors: shapes are checked when an op is called; a mismatch throws depengine::Error
// naming the op and both shapes, and nothing is pushed. An exception thrown while an op
// runs reaches the user at the next blocker (wait_to_read, to_vector, item, printing,
// waitall) on an array that depends on it.
//
// Devices: an array lives on Device::cpu() or Device::gpu(i). Ops on GPU arrays run on that
// GPU's compute lane; an op whose arrays are on different devices throws Error naming both
// devices and the op, and nothing is pushed; copy_to moves an array between devices. A GPU
// is a CUDA device, or — on an engine made with EngineOptions::sim_gpus > 0 — one of its
// host-simulated GPUs, whose arrays live in host memory (docs/gpu.md).
//
// Thread safety: different threads may use different arrays, and read the same array,
// concurrently. Concurrent writes to one array (in-place ops) are ordered by the engine in
// the order the pushes happen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "depengine/engine.h"

namespace depengine {

// Dimensions, outermost first. {} is a 0-d array holding one element.
//
// Limits, checked wherever a shape is made — creation functions, reshape, broadcasting, dot
// and gemm results, reductions — when the op is called, before anything is pushed or
// allocated (a shape that breaks one throws depengine::Error naming the op and the shape,
// and the engine goes on):
// - at most kMaxNdim dimensions;
// - the product of the dimensions that are not 0, times 4 bytes, at most PTRDIFF_MAX
//   (numpy's rule: an empty array may not have dimensions whose product would overflow
//   either, since strides and loop bounds are computed from them). So an array's element
//   count, its byte size and every product of some of its dimensions fit in size_t.
// Matrix products also need each dimension at most INT_MAX, the int that BLAS takes.
using Shape = std::vector<std::size_t>;

// The most dimensions a shape may have: 32, numpy's limit before 2.0 (NPY_MAXDIMS; 64 since).
// Among others, it bounds the recursion of printing.
inline constexpr std::size_t kMaxNdim = 32;

// numpy's spelling: "(2, 3)", "(5,)", "()".
std::string shape_str(const Shape& shape);

namespace detail {
struct Chunk;
struct Context;
struct ArrayInternals;
}  // namespace detail

namespace autograd {
// How a variable's gradient buffer receives its gradient (depengine/autograd.h).
enum class GradReq : std::uint8_t { null, write, add };
namespace detail {
struct Node;
}  // namespace detail
}  // namespace autograd

class NDArray {
 public:
  // A null array: it holds nothing, and every op rejects it with an Error.
  NDArray() = default;

  bool defined() const noexcept { return chunk_ != nullptr; }
  const Shape& shape() const noexcept { return shape_; }
  std::size_t ndim() const noexcept { return shape_.size(); }
  // Number of elements (0 for a null array).
  std::size_t size() const noexcept;
  Device device() const noexcept;
  // True for the result of a comparison (nd::compare: 1.0f / 0.0f standing in for numpy's
  // bool) not written in place since; Python indexes by such an array as a boolean mask.
  bool is_mask() const noexcept;

  // The engine this array's ops are pushed to.
  Engine& engine() const;
  // The var that orders accesses to the storage. An op of your own that reads or writes
  // data() must declare it: `engine().push(fn, {x.var()}, {y.var()})`.
  const Var& var() const;
  // The storage (row-major). Only valid to touch inside an op that declares var(), and on
  // the op's device: a GPU array's storage is device memory (host memory on a simulated
  // GPU), known only once its allocation op has run, so call data() inside the op.
  float* data() const;

  // Blocks until every write to this array pushed before has finished; rethrows the
  // failure of the op that should have produced it.
  void wait_to_read() const;
  // Blocks (wait_to_read), then copies the elements out. A GPU array is copied to the
  // host first (copy_to(Device::cpu())).
  std::vector<float> to_vector() const;
  // Blocks, then returns the only element; throws Error unless size() == 1.
  float item() const;

  // A new array with the same elements (pushed, like every op).
  NDArray copy() const;
  // A new array with the same elements on `device`, on the same engine. The copy is pushed
  // on a copy lane, so it overlaps compute: host to GPU on the GPU's copy_to_device lane,
  // GPU to host on the GPU's copy_from_device lane, GPU to GPU on the destination's
  // copy_to_device lane. To the array's own device it is copy().
  //   NDArray g = x.copy_to(depengine::Device::gpu(0));
  NDArray copy_to(Device device) const;
  // A view with another shape and the same storage and var (no copy, nothing pushed).
  // `shape` must have size() elements and be within the limits of Shape.
  NDArray reshape(Shape shape) const;
  // The transpose of a 2-D array (a copy); 0-d and 1-d arrays are copied as they are.
  NDArray T() const;

  NDArray operator-() const;
  // In place: this array's var is read and written. `b` must broadcast to shape().
  NDArray& operator+=(const NDArray& b);
  NDArray& operator-=(const NDArray& b);
  NDArray& operator*=(const NDArray& b);
  NDArray& operator/=(const NDArray& b);
  NDArray& operator+=(float s);
  NDArray& operator-=(float s);
  NDArray& operator*=(float s);
  NDArray& operator/=(float s);

  // Autograd (depengine/autograd.h). attach_grad makes this array a variable with a
  // gradient buffer of zeros (grad()); grad() is a null array when none is attached.
  // detach() is the same storage without autograd history. backward() is
  // autograd::backward({*this}, {head_grad}, retain_graph, train_mode), with ones for
  // head_grad when none is given.
  void attach_grad(autograd::GradReq req = autograd::GradReq::write);
  NDArray grad() const;
  NDArray detach() const;
  void backward() const;
  void backward(const NDArray& head_grad, bool retain_graph = false, bool train_mode = true) const;

 private:
  friend struct detail::ArrayInternals;
  NDArray(std::shared_ptr<detail::Chunk> chunk, Shape shape)
      : chunk_(std::move(chunk)), shape_(std::move(shape)) {}

  std::shared_ptr<detail::Chunk> chunk_;
  Shape shape_;
  // The autograd node that made this array (an op recorded on the tape, or the variable
  // made by attach_grad) and which of its outputs this is; null without history.
  std::shared_ptr<autograd::detail::Node> node_;
  std::uint32_t output_ = 0;
};

// Elementwise with numpy broadcasting (shapes aligned from the right; a dimension of 1,
// or a missing one, is repeated). A row vector (n,) or (1, n) or a column vector (m, 1)
// broadcasts over an (m, n) matrix.
NDArray operator+(const NDArray& a, const NDArray& b);
NDArray operator-(const NDArray& a, const NDArray& b);
NDArray operator*(const NDArray& a, const NDArray& b);
NDArray operator/(const NDArray& a, const NDArray& b);
NDArray operator+(const NDArray& a, float s);
NDArray operator-(const NDArray& a, float s);
NDArray operator*(const NDArray& a, float s);
NDArray operator/(const NDArray& a, float s);
NDArray operator+(float s, const NDArray& a);
NDArray operator-(float s, const NDArray& a);
NDArray operator*(float s, const NDArray& a);
NDArray operator/(float s, const NDArray& a);

// Prints like numpy's repr (as mxnet.np does): `array([[1., 2.],\n       [3., 4.]])`,
// summarized with "..." above 1000 elements. Blocks until the array is computed.
std::ostream& operator<<(std::ostream& os, const NDArray& a);

// Blocks until everything pushed to the current engine before has finished; rethrows the
// first failure since the previous waitall (Engine::wait_all).
void waitall();

// The engine that creation functions on this thread push to.
Engine& current_engine();

// Makes `engine` the current engine of the calling thread until the scope ends (scopes
// nest; the innermost wins). Each scope has its own random generator state, seeded as
// if by nd::seed(0), so two scopes that run the same program produce the same arrays.
// The engine must outlive the scope and every array made under it.
//
//   auto e = depengine::Engine::create("naive");
//   {
//     depengine::EngineScope use(*e);
//     NDArray x = nd::ones({3});   // pushed to *e
//   }
//
// A scope belongs to the thread that made it, and ends on that thread. Scopes may end in
// any order: one that ends while a scope made after it lives leaves that one current, and
// the later scope, when it ends, returns to what was current before the earlier one.
class EngineScope {
 public:
  explicit EngineScope(Engine& engine);
  ~EngineScope();
  EngineScope(const EngineScope&) = delete;
  EngineScope& operator=(const EngineScope&) = delete;

 private:
  std::unique_ptr<detail::Context> context_;
};

namespace nd {

// Creation, on `device`. A GPU that the current engine does not have (no such simulated
// GPU, no such CUDA device, or a build without CUDA) is an Error naming it.
NDArray zeros(const Shape& shape, Device device = Device::cpu());
NDArray ones(const Shape& shape, Device device = Device::cpu());
NDArray full(const Shape& shape, float value, Device device = Device::cpu());
// 1-d: start, start + step, ... while < stop (> stop for a negative step). start, stop and
// step must be finite and step non-zero; a count ⌈(stop - start) / step⌉ that does not fit
// an array (arange(0, 1e30)) is an Error, as for any shape.
NDArray arange(double start, double stop, double step = 1.0, Device device = Device::cpu());
// An array of a's shape on a's device and engine, filled with 0 / 1 (numpy's zeros_like).
NDArray zeros_like(const NDArray& a);
NDArray ones_like(const NDArray& a);
// `a` repeated along the dimensions where it is 1 or missing, to `shape` (numpy's
// broadcast_to; a new array). Error when a's shape does not broadcast to `shape`.
NDArray broadcast_to(const NDArray& a, const Shape& shape);
// Copies `values` (row-major, size = product of shape) into a new array at once, so the
// caller may reuse its buffer.
NDArray array(std::span<const float> values, const Shape& shape, Device device = Device::cpu());
NDArray array(const std::vector<float>& values, const Shape& shape,
              Device device = Device::cpu());

// Random arrays from the current engine's counter-based generator (Philox4x32-10). The
// generator's state is an engine var that each random op reads and writes, so the same
// seed gives the same arrays on any engine and any number of workers. low <= high and
// mean, stddev >= 0 must be finite, and so must high - low (numpy's rule): otherwise Error,
// and nothing is pushed.
NDArray random_uniform(const Shape& shape, float low = 0.0f, float high = 1.0f,
                       Device device = Device::cpu());
NDArray random_normal(const Shape& shape, float mean = 0.0f, float stddev = 1.0f,
                      Device device = Device::cpu());
// Restarts the current engine's generator (pushed, so it is ordered with random ops).
void seed(std::uint64_t seed);

// Matrix product as numpy.dot for 1-d and 2-d arrays: (m,k)·(k,n) -> (m,n),
// (k,)·(k,n) -> (n,), (m,k)·(k,) -> (m,), (k,)·(k,) -> ().
NDArray dot(const NDArray& a, const NDArray& b);

NDArray add(const NDArray& a, const NDArray& b);
NDArray subtract(const NDArray& a, const NDArray& b);
NDArray multiply(const NDArray& a, const NDArray& b);
NDArray divide(const NDArray& a, const NDArray& b);
NDArray pow(const NDArray& a, const NDArray& b);
NDArray pow(const NDArray& a, float exponent);
NDArray maximum(const NDArray& a, const NDArray& b);
NDArray minimum(const NDArray& a, const NDArray& b);

NDArray negative(const NDArray& a);
NDArray exp(const NDArray& a);
NDArray log(const NDArray& a);
NDArray relu(const NDArray& a);
NDArray sigmoid(const NDArray& a);
NDArray tanh(const NDArray& a);
NDArray sqrt(const NDArray& a);
NDArray abs(const NDArray& a);
NDArray square(const NDArray& a);

// Reductions over all elements (a 0-d result) or along `axis` (negative counts from the
// end; the axis is removed from the shape). argmax gives float indices.
NDArray sum(const NDArray& a);
NDArray sum(const NDArray& a, int axis);
NDArray mean(const NDArray& a);
NDArray mean(const NDArray& a, int axis);
NDArray max(const NDArray& a);
NDArray max(const NDArray& a, int axis);
NDArray argmax(const NDArray& a);
NDArray argmax(const NDArray& a, int axis);

NDArray copy(const NDArray& a);
NDArray transpose(const NDArray& a);

// Adds `src` into `dst` as one contribution to a reduction (gradient accumulation; the
// engine's reduce(v) accesses, as StarPU's STARPU_REDUX): accumulations into dst pushed one
// after another run concurrently, each adding into a private buffer (zeros of dst's shape)
// of the thread that runs it, and the buffers are summed into dst, as a tree, before dst is
// next read or written (a blocker included) or at waitall. Unlike `dst += src`, which adds
// in push order, the order of the additions, and so the float rounding of the result,
// depends on scheduling. CPU arrays of the same shape on one engine; src may not share
// dst's storage. Throws Error otherwise, and nothing is pushed.
//   NDArray total = nd::zeros({n});
//   for (const NDArray& g : grads) nd::accumulate(total, g);
void accumulate(NDArray& dst, const NDArray& src);

// Elementwise comparisons with numpy broadcasting: 1.0f where it holds, else 0.0f (float32
// stands in for numpy's bool). Not recorded by autograd: their gradient is zero.
enum class Compare { equal, not_equal, less, less_equal, greater, greater_equal };
NDArray compare(const NDArray& a, const NDArray& b, Compare op);
NDArray compare(const NDArray& a, float s, Compare op);

// Basic indexing, as numpy's a[i, j:k:s]: per dimension, `count` elements start, start +
// step, ... (step may be negative, never 0); a dimension with keep == false (an integer
// index, count 1) is dropped from the result. Copies (pushed), with its gradient. Throws
// Error for a selection outside the array. Writes through a selection: nd::slice_assign
// (depengine/ndarray_ops.h).
struct SliceDim {
  long start = 0;
  long step = 1;
  std::size_t count = 0;
  bool keep = true;
};
NDArray slice(const NDArray& a, const std::vector<SliceDim>& dims);

// Bytes of array storage allocated (freed when the deferred delete of the last handle's
// var runs), the most at once since the last reset, and the bytes of freed host storage
// kept for reuse by the next arrays of the same sizes (at most pool_cap(); MXNet's pooled
// storage manager does the same; blocks of at most 4 KiB go back to oneTBB's scalable
// allocator instead, outside sanitizer builds). Storage beyond the cap goes back to the
// system. Process-wide; thread-safe.
struct MemoryStats {
  std::size_t in_use = 0;
  std::size_t peak = 0;
  std::size_t cached = 0;
};
MemoryStats memory_stats() noexcept;
// The most bytes of freed host storage the pool keeps: DEPENGINE_POOL_CAP_MB (MiB, default
// 64; read when the first array larger than 4 KiB is made, a bad value throwing EnvError
// there), or what set_pool_cap set; set_pool_cap gives back at once what the pool holds
// beyond the new cap (0: keep nothing).
//   depengine::nd::set_pool_cap(std::size_t{16} << 20);
std::size_t pool_cap() noexcept;
void set_pool_cap(std::size_t bytes) noexcept;
void reset_memory_peak() noexcept;

}  // namespace nd
}  // namespace depengine
