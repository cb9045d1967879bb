// NDArray handles, storage, engine contexts and blockers.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <ostream>
#include <string>
#include <unordered_map>
#include <vector>

#include <sys/mman.h>

#include <oneapi/tbb/scalable_allocator.h>

#include "depengine/config.h"
#include "depengine/env.h"
#include "depengine/ops/size.h"
#include "autograd_internal.h"
#include "internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#if DEPENGINE_HAS_CUDA
#include "depengine/ops/cuda.h"
#endif

namespace depengine {
namespace detail {
namespace {

constexpr std::align_val_t kAlign{64};

std::atomic<std::size_t> g_in_use{0};
std::atomic<std::size_t> g_peak{0};

thread_local Context* t_context = nullptr;

// Under AddressSanitizer a pooled block is poisoned while it waits for reuse, so a use of
// an array's storage after its delete is still reported.
#if defined(__SANITIZE_ADDRESS__)
void poison(void* p, std::size_t bytes) { ASAN_POISON_MEMORY_REGION(p, bytes); }
void unpoison(void* p, std::size_t bytes) { ASAN_UNPOISON_MEMORY_REGION(p, bytes); }
#else
void poison(void*, std::size_t) {}
void unpoison(void*, std::size_t) {}
#endif

// Blocks of at least kMapBlock bytes are mapped and unmapped directly, so that a freed one
// goes back to the system. From glibc's malloc it did not: once a large block is freed its
// mmap threshold grows past that size, later ones come from the heap of the thread that
// asks (arenas per worker), and a heap is trimmed only from its top, so after a burst of
// 1000x1000 results that Python dropped about 290 MB stayed resident. Under a sanitizer
// every block comes from operator new, which the sanitizer checks.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::size_t kMapBlock = SIZE_MAX;
#else
constexpr std::size_t kMapBlock = std::size_t{256} << 10;
#endif

void* system_take(std::size_t bytes) {
  if (bytes < kMapBlock) return ::operator new(bytes, kAlign);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;  // page-aligned, so kAlign-aligned
}

void system_give(void* p, std::size_t bytes) noexcept {
  if (bytes < kMapBlock) {
    ::operator delete(p, kAlign);
  } else {
    ::munmap(p, bytes);
  }
}

// Host storage is pooled, as MXNet's pooled storage manager does: a freed block is kept
// for the next array of the same size instead of going back to the system. A training
// step frees and reallocates the same few sizes every step; without the pool each new
// array's pages were faulted in again (about 190 page faults per MLP step, most of them on
// the GEMMs' first writes; the pool took the MLP from 153k to 172k examples/s). At most
// cap() bytes are kept beyond the live arrays (nd::set_pool_cap; DEPENGINE_POOL_CAP_MB,
// default 64).
class HostPool {
 public:
  // A bad DEPENGINE_POOL_CAP_MB is not thrown here (memory_stats() may come first, and is
  // noexcept) but by every take(), so the first array that needs the pool reports it.
  HostPool() noexcept {
    std::size_t mb = 64;
    try {
      mb = static_cast<std::size_t>(env_long("DEPENGINE_POOL_CAP_MB", 0, 1L << 30, 64));
    } catch (const EnvError& e) {
      bad_env_ = e.what();
    } catch (...) {  // no memory for the message: the default cap
    }
    cap_.store(mb << 20, std::memory_order_relaxed);
  }

  std::size_t cap() const noexcept { return cap_.load(std::memory_order_relaxed); }

  // Sets the cap and gives back what the pool holds beyond it.
  void set_cap(std::size_t bytes) noexcept {
    std::vector<std::pair<void*, std::size_t>> drop;
    {
      std::lock_guard lk(mu_);
      cap_.store(bytes, std::memory_order_relaxed);
      for (auto it = free_.begin(); it != free_.end() && cached_ > bytes;) {
        auto& list = it->second;
        while (!list.empty() && cached_ > bytes) {
          try {
            drop.emplace_back(list.back(), it->first);
          } catch (...) {  // no memory for the list: keep the rest for now
            break;
          }
          list.pop_back();
          cached_ -= it->first;
        }
        it = list.empty() ? free_.erase(it) : std::next(it);
      }
    }
    for (auto [p, n] : drop) {
      unpoison(p, n);
      system_give(p, n);
    }
  }

  float* take(std::size_t bytes) {
    if (!bad_env_.empty()) throw EnvError(bad_env_);
    {
      std::lock_guard lk(mu_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= bytes;
        unpoison(p, bytes);
        return static_cast<float*>(p);
      }
    }
    try {
      return static_cast<float*>(system_take(bytes));
    } catch (const std::bad_alloc&) {
      // The blocks kept for reuse may be the memory this one needs (MXNet's pooled storage
      // manager does the same): give them all back and try once more.
      release_all();
      return static_cast<float*>(system_take(bytes));
    }
  }

  void release_all() noexcept {
    std::unordered_map<std::size_t, std::vector<void*>> blocks;
    {
      std::lock_guard lk(mu_);
      blocks.swap(free_);
      cached_ = 0;
    }
    for (auto& [bytes, list] : blocks) {
      for (void* p : list) {
        unpoison(p, bytes);
        system_give(p, bytes);
      }
    }
  }

  void give(void* p, std::size_t bytes) noexcept {
    {
      std::lock_guard lk(mu_);
      // cached_ <= cap: subtracting cannot wrap, adding `bytes` might.
      const std::size_t cap = cap_.load(std::memory_order_relaxed);
      const std::size_t cached = cached_.load(std::memory_order_relaxed);
      if (cached <= cap && bytes <= cap - cached) {
        try {
          free_[bytes].push_back(p);
          cached_ += bytes;
          poison(p, bytes);
          return;
        } catch (...) {  // no memory for the bookkeeping: free the block instead
        }
      }
    }
    system_give(p, bytes);
  }

  std::size_t cached() const noexcept { return cached_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::size_t> cap_;  // written under mu_
  std::string bad_env_;
  std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::atomic<std::size_t> cached_{0};  // written under mu_
};

// Never destroyed: arrays may still be freed during exit (the default engine finishes its
// pending deletes then), after function-local statics made later than it are gone.
HostPool& host_pool() {
  static HostPool* pool = new HostPool;
  return *pool;
}

// Small blocks skip the pool: oneTBB's scalable allocator keeps per-thread caches that take
// a block freed on a worker back without a lock, where the pool's mutex and map cost more than
// the op's push (perf, PushCost_AddDropped), and a block this small faults in one page at most.
// Under a sanitizer every block goes through the pool, which poisons it while it waits.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::size_t kSmallBlock = 0;
#else
constexpr std::size_t kSmallBlock = 4096;
#endif

float* take_block(std::size_t bytes) {
  if (bytes <= kSmallBlock) {
    if (void* p = scalable_aligned_malloc(bytes, static_cast<std::size_t>(kAlign))) {
      return static_cast<float*>(p);
    }
    throw std::bad_alloc();
  }
  return host_pool().take(bytes);
}

void give_block(float* p, std::size_t bytes) noexcept {
  if (bytes <= kSmallBlock) {
    scalable_aligned_free(p);
    return;
  }
  host_pool().give(p, bytes);
}

}  // namespace

float* allocate_storage(std::size_t elements) {
  if (elements == 0) return nullptr;
  const std::size_t bytes = ops::float_bytes(elements, "array");
  float* p = take_block(bytes);
  const std::size_t now = g_in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::size_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return p;
}

void free_storage(float* p, std::size_t elements) noexcept {
  if (!p) return;
  const std::size_t bytes = elements * sizeof(float);  // allocate_storage checked it
  give_block(p, bytes);
  g_in_use.fetch_sub(bytes, std::memory_order_relaxed);
}

bool check_device(const Engine& e, Device d, const char* op) {
  if (d.is_cpu()) return false;
  const std::string where = std::string(op) + ": " + d.str();
  const int sim = e.sim_gpus();
  if (sim > 0) {
    if (d.id < 0 || d.id >= sim) {
      throw Error(where + " is not one of the " + std::to_string(sim) +
                  " simulated GPUs of this engine");
    }
    return true;
  }
#if DEPENGINE_HAS_CUDA
  const int count = Device::gpu_count();
  if (d.id < 0 || d.id >= count) {
    throw Error(where + " is not a usable CUDA device (" + std::to_string(count) +
                " found; EngineOptions::sim_gpus or DEPENGINE_SIM_GPUS gives host-simulated "
                "GPUs)");
  }
  return false;
#else
  throw Error(where + ": this build has no CUDA (EngineOptions::sim_gpus or "
              "DEPENGINE_SIM_GPUS gives host-simulated GPUs)");
#endif
}

Chunk::Chunk(Engine& e, std::size_t elements, Device d)
    : engine(&e),
      device(d),
      simulated(check_device(e, d, "array")),
      var(e.new_var()),
      size(elements),
      data(d.is_cpu() || simulated ? allocate_storage(elements) : nullptr),
      buffer(d.is_gpu() ? new DeviceBuffer{data} : nullptr) {
#if DEPENGINE_HAS_CUDA
  if (d.is_gpu() && !simulated) {
    DeviceBuffer* b = buffer;
    const std::size_t n = size;
    try {
      // Once: a segment that recorded this op (nd::record) runs it again on each replay.
      e.push([b, n](const RunContext& ctx) {
               if (!b->data) b->data = ops::cuda::allocate(ctx, n);
             }, {},
             {var}, {.device = d, .lane = Lane::compute, .name = "allocate"});
    } catch (...) {
      delete b;
      e.delete_var(var);
      throw;
    }
  }
#endif
}

Chunk::~Chunk() {
  float* p = data;
  const std::size_t n = size;
  DeviceBuffer* b = buffer;
#if DEPENGINE_HAS_CUDA
  if (device.is_gpu() && !simulated) {
    try {
      // Stream-ordered: the block returns to the device's pool after the var's earlier
      // work, which the engine makes this stream wait for.
      engine->push([b](const RunContext& ctx) { ops::cuda::deallocate(ctx, b->data); }, {},
                   {var}, {.device = device, .lane = Lane::compute, .name = "free"});
    } catch (...) {
      // Refused by an engine that is shutting down: the block stays in the device's pool
      // until the process ends.
    }
  }
#endif
  try {
    // The callbacks only give memory back, so the engine needs no op to delete an array
    // whose ops are still pending: the last of them frees it as it finishes.
    if (b) {
      engine->delete_var(var, [p, n, b] {
        free_storage(p, n);
        delete b;
      }, {.frees_memory_only = true});
    } else {
      // Two words: std::function keeps it inline, with no heap block per dropped array.
      engine->delete_var(var, [p, n] { free_storage(p, n); }, {.frees_memory_only = true});
    }
  } catch (...) {
    // delete_var is accepted until an engine's shutdown has finished every op, so a refusal
    // usually means nothing can still use the storage. Any other failure (out of memory for
    // the op) leaves kernels that may still use it: then it is left allocated, never freed
    // under them.
    if (engine->pending() == 0) {
      free_storage(p, n);
      delete b;
    }
  }
}

Generator::Generator(Engine& e) : engine(&e), var(e.new_var()), rng(new Rng{}) {}

Generator::~Generator() {
  Rng* r = rng;
  try {
    engine->delete_var(var, [r] { delete r; }, {.frees_memory_only = true});
  } catch (...) {
    if (engine->pending() == 0) delete r;  // as in ~Chunk: never under a running op
  }
}

Context::Context(Engine& e) : engine(&e), generator(std::make_shared<Generator>(e)) {}

Generator& use_generator(const Context& cx) {
  if (t_recorded_generators) t_recorded_generators->push_back(cx.generator);
  return *cx.generator;
}

Context& current_context() {
  if (t_context) return *t_context;
  // Made after Engine::get()'s engine, so destroyed before it.
  static Context default_context(Engine::get());
  return default_context;
}

NDArray ArrayInternals::make(Engine& e, Shape shape, const char* op) {
  return make(e, std::move(shape), Device::cpu(), op);
}

NDArray ArrayInternals::make(Engine& e, Shape shape, Device device, const char* op) {
  const std::size_t n = checked_size(shape, op);
  // oneTBB's scalable allocator: a chunk is made on the pushing thread and usually freed on
  // a worker (the last handle may be an op's); glibc's malloc spent more on that cross-thread
  // traffic than the rest of a small op's push (perf, PushCost_AddDropped).
  // Under a sanitizer the default allocator stays, as for the engine's ops.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  using Alloc = std::allocator<Chunk>;
#else
  using Alloc = tbb::scalable_allocator<Chunk>;
#endif
  std::shared_ptr<Chunk> chunk;
  try {
    chunk = std::allocate_shared<Chunk>(Alloc{}, e, n, device);
  } catch (const std::bad_alloc&) {
    // A shape within the limits that the allocator still refuses: say which op and how
    // much, as for a shape that does not fit. Nothing was pushed (the var, made first, goes
    // with its handle), so the engine goes on.
    throw Error(std::string(op) + ": out of memory: shape " + shape_str(shape) + " on " +
                device.str() + " needs " + std::to_string(n * sizeof(float)) + " bytes");
  }
  NDArray out(std::move(chunk), std::move(shape));
  if (t_recorded_chunks) t_recorded_chunks->push_back(out.chunk_);
  return out;
}

std::size_t checked_size(const Shape& shape, const char* op) {
  if (shape.size() > kMaxNdim) {
    // Not printed: it may have any number of dimensions.
    throw Error(std::string(op) + ": a shape of " + std::to_string(shape.size()) +
                " dimensions has more than the " + std::to_string(kMaxNdim) +
                " an array may have (kMaxNdim)");
  }
  for (std::size_t i = 0; i < shape.size(); ++i) {
    // Shape holds size_t: a negative dimension (numpy's reshape(-1)) arrives as a huge one,
    // and "too big" alone would not say where it came from.
    if (shape[i] > static_cast<std::size_t>(PTRDIFF_MAX)) {
      throw Error(std::string(op) + ": shape " + shape_str(shape) + " has dimension " +
                  std::to_string(i) + " = " +
                  std::to_string(static_cast<std::ptrdiff_t>(shape[i])) +
                  " converted to size_t: dimensions may not be negative (nor is -1 inferred)");
    }
  }
  const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
  std::size_t nonzero = 1;
  for (std::size_t d : shape) {
    if (d != 0 && __builtin_mul_overflow(nonzero, d, &nonzero)) {
      throw Error(std::string(op) + ": shape " + shape_str(shape) +
                  (empty ? " is too big: the product of its non-zero dimensions does not fit "
                           "in size_t"
                         : " has more elements than fit in size_t"));
    }
  }
  if (nonzero > ops::kMaxFloats) {
    const std::string count = std::to_string(nonzero);
    throw Error(std::string(op) + ": shape " + shape_str(shape) + " is too big: " +
                (empty ? "the product of its non-zero dimensions, " + count + ", times 4 bytes is"
                       : count + " float32 elements take") +
                " more than the " + std::to_string(ops::kMaxBytes) +
                " bytes (PTRDIFF_MAX) one array may have");
  }
  return empty ? 0 : nonzero;
}

std::size_t shape_size(const Shape& shape) noexcept {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

Chunk& require(const NDArray& a, const char* op) {
  Chunk* c = ArrayInternals::chunk(a);
  if (!c) throw Error(std::string(op) + ": the array is null (default-constructed)");
  if (t_recorded_chunks) t_recorded_chunks->push_back(ArrayInternals::shared_chunk(a));
  return *c;
}

}  // namespace detail

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

// A null array's shape is empty like a 0-d array's, but it holds no element.
std::size_t NDArray::size() const noexcept { return chunk_ ? detail::shape_size(shape_) : 0; }

bool NDArray::is_mask() const noexcept {
  return chunk_ && chunk_->is_mask.load(std::memory_order_relaxed);
}

Device NDArray::device() const noexcept { return chunk_ ? chunk_->device : Device::cpu(); }

Engine& NDArray::engine() const { return *detail::require(*this, "engine").engine; }

const Var& NDArray::var() const { return detail::require(*this, "var").var; }

float* NDArray::data() const { return detail::ptr(detail::require(*this, "data")).get(); }

void NDArray::wait_to_read() const {
  detail::Chunk& c = detail::require(*this, "wait_to_read");
  c.engine->wait_to_read(c.var);
}

std::vector<float> NDArray::to_vector() const {
  detail::Chunk& c = detail::require(*this, "to_vector");
  if (c.device.is_gpu()) return copy_to(Device::cpu()).to_vector();
  c.engine->wait_to_read(c.var);
  return std::vector<float>(c.data, c.data + size());
}

float NDArray::item() const {
  detail::Chunk& c = detail::require(*this, "item");
  if (size() != 1) {
    throw Error("item: the array of shape " + shape_str(shape_) + " has " +
                std::to_string(size()) + " elements, not 1");
  }
  if (c.device.is_gpu()) return copy_to(Device::cpu()).item();
  c.engine->wait_to_read(c.var);
  return c.data[0];
}

NDArray NDArray::reshape(Shape shape) const {
  detail::require(*this, "reshape");
  if (detail::checked_size(shape, "reshape") != size()) {
    throw Error("reshape: cannot reshape an array of shape " + shape_str(shape_) + " into " +
                shape_str(shape));
  }
  NDArray out = detail::ArrayInternals::view(*this, std::move(shape));
  if (autograd::detail::should_record({this})) {
    const Shape from = shape_;
    autograd::detail::record_op("reshape", {*this}, {&out}, {},
                                [from](const autograd::detail::Saved&,
                                       const std::vector<NDArray>& g) {
                                  return std::vector<NDArray>{g[0].reshape(from)};
                                });
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, const NDArray& a) {
  const std::vector<float> v = a.to_vector();
  return os << detail::format_array(v.data(), a.shape());
}

void waitall() { current_engine().wait_all(); }

Engine& current_engine() { return *detail::current_context().engine; }

EngineScope::EngineScope(Engine& engine) : context_(std::make_unique<detail::Context>(engine)) {
  context_->previous = detail::t_context;
  detail::t_context = context_.get();
}

EngineScope::~EngineScope() {
  // Unlinked wherever it is in the chain: a scope that ends before an inner one (scopes held
  // in unique_ptrs) must not leave the inner one to return to this freed context.
  detail::Context** link = &detail::t_context;
  while (*link && *link != context_.get()) link = &(*link)->previous;
  if (*link) *link = context_->previous;
}

namespace nd {

MemoryStats memory_stats() noexcept {
  return {detail::g_in_use.load(std::memory_order_relaxed),
          detail::g_peak.load(std::memory_order_relaxed), detail::host_pool().cached()};
}

std::size_t pool_cap() noexcept { return detail::host_pool().cap(); }

void set_pool_cap(std::size_t bytes) noexcept { detail::host_pool().set_cap(bytes); }

void reset_memory_peak() noexcept {
  detail::g_peak.store(detail::g_in_use.load(std::memory_order_relaxed),
                       std::memory_order_relaxed);
}

}  // namespace nd
}  // namespace depengine
