// NDArray handles, storage, engine contexts and blockers.
#include <atomic>
#include <cstring>
#include <new>
#include <ostream>

#include "internal.h"

namespace depengine {
namespace detail {
namespace {

constexpr std::align_val_t kAlign{64};

std::atomic<std::size_t> g_in_use{0};
std::atomic<std::size_t> g_peak{0};

thread_local Context* t_context = nullptr;

}  // namespace

float* allocate_storage(std::size_t elements) {
  if (elements == 0) return nullptr;
  const std::size_t bytes = elements * sizeof(float);
  auto* p = static_cast<float*>(::operator new(bytes, kAlign));
  const std::size_t now = g_in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::size_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return p;
}

void free_storage(float* p, std::size_t elements) noexcept {
  if (!p) return;
  ::operator delete(p, kAlign);
  g_in_use.fetch_sub(elements * sizeof(float), std::memory_order_relaxed);
}

Chunk::Chunk(Engine& e, std::size_t elements)
    : engine(&e), var(e.new_var()), size(elements), data(allocate_storage(elements)) {}

Chunk::~Chunk() {
  float* p = data;
  const std::size_t n = size;
  try {
    engine->delete_var(var, [p, n] { free_storage(p, n); });
  } catch (...) {
    // delete_var refuses only an engine that is shutting down, which has already
    // finished every op, so nothing can still use the storage.
    free_storage(p, n);
  }
}

Context::Context(Engine& e) : engine(&e), rng_var(e.new_var()), rng(new Rng{}) {}

Context::~Context() {
  Rng* r = rng;
  try {
    engine->delete_var(rng_var, [r] { delete r; });
  } catch (...) {
    delete r;
  }
}

Context& current_context() {
  if (t_context) return *t_context;
  // Made after Engine::get()'s engine, so destroyed before it.
  static Context default_context(Engine::get());
  return default_context;
}

NDArray ArrayInternals::make(Engine& e, Shape shape) {
  const std::size_t n = shape_size(shape);
  return NDArray(std::make_shared<Chunk>(e, n), std::move(shape));
}

std::size_t shape_size(const Shape& shape) noexcept {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

Chunk& require(const NDArray& a, const char* op) {
  Chunk* c = ArrayInternals::chunk(a);
  if (!c) throw Error(std::string(op) + ": the array is null (default-constructed)");
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

std::size_t NDArray::size() const noexcept { return detail::shape_size(shape_); }

Device NDArray::device() const noexcept { return Device::cpu(); }

Engine& NDArray::engine() const { return *detail::require(*this, "engine").engine; }

const Var& NDArray::var() const { return detail::require(*this, "var").var; }

float* NDArray::data() const { return detail::require(*this, "data").data; }

void NDArray::wait_to_read() const {
  detail::Chunk& c = detail::require(*this, "wait_to_read");
  c.engine->wait_to_read(c.var);
}

std::vector<float> NDArray::to_vector() const {
  detail::Chunk& c = detail::require(*this, "to_vector");
  c.engine->wait_to_read(c.var);
  return std::vector<float>(c.data, c.data + size());
}

float NDArray::item() const {
  detail::Chunk& c = detail::require(*this, "item");
  if (size() != 1) {
    throw Error("item: the array of shape " + shape_str(shape_) + " has " +
                std::to_string(size()) + " elements, not 1");
  }
  c.engine->wait_to_read(c.var);
  return c.data[0];
}

NDArray NDArray::reshape(Shape shape) const {
  detail::require(*this, "reshape");
  if (detail::shape_size(shape) != size()) {
    throw Error("reshape: cannot reshape an array of shape " + shape_str(shape_) + " into " +
                shape_str(shape));
  }
  return detail::ArrayInternals::view(*this, std::move(shape));
}

std::ostream& operator<<(std::ostream& os, const NDArray& a) {
  const std::vector<float> v = a.to_vector();
  return os << detail::format_array(v.data(), a.shape());
}

void waitall() { current_engine().wait_all(); }

Engine& current_engine() { return *detail::current_context().engine; }

EngineScope::EngineScope(Engine& engine)
    : context_(std::make_unique<detail::Context>(engine)), previous_(detail::t_context) {
  detail::t_context = context_.get();
}

EngineScope::~EngineScope() { detail::t_context = previous_; }

namespace nd {

MemoryStats memory_stats() noexcept {
  return {detail::g_in_use.load(std::memory_order_relaxed),
          detail::g_peak.load(std::memory_order_relaxed)};
}

void reset_memory_peak() noexcept {
  detail::g_peak.store(detail::g_in_use.load(std::memory_order_relaxed),
                       std::memory_order_relaxed);
}

}  // namespace nd
}  // namespace depengine
