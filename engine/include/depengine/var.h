// depengine/var.h — Var, the handle to anything whose accesses the engine orders.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

namespace depengine {

namespace detail {
struct VarState;
// How a Var in a push's writes list is accessed (set by commute() and reduce()).
enum class VarMode : std::uint8_t { plain, commute, reduce };
void var_add_ref(VarState* s) noexcept;
void var_release(VarState* s) noexcept;
std::uint64_t var_id(const VarState* s) noexcept;
}  // namespace detail

// A cheap, copyable, reference-counted handle to an engine variable. A variable stands for
// a piece of state (an array's storage, an RNG state, a file); operations declare which
// variables they read and write, and the engine orders them accordingly.
//
//   depengine::Var v = engine->new_var();
//   engine->push([] { /* write the state v stands for */ }, {}, {v});
//
// Copying and destroying handles is thread-safe. A default-constructed Var is null and is
// rejected by every engine call.
class Var {
 public:
  Var() noexcept = default;
  // Adopts one reference to `s` (engines use this; users get vars from Engine::new_var).
  explicit Var(detail::VarState* s) noexcept : bits_(reinterpret_cast<std::uintptr_t>(s)) {}
  Var(const Var& o) noexcept : bits_(o.bits_) {
    if (detail::VarState* s = state()) detail::var_add_ref(s);
  }
  Var(Var&& o) noexcept : bits_(o.bits_) { o.bits_ = 0; }
  Var& operator=(const Var& o) noexcept {
    Var tmp(o);
    std::swap(bits_, tmp.bits_);
    return *this;
  }
  Var& operator=(Var&& o) noexcept {
    Var tmp(std::move(o));
    std::swap(bits_, tmp.bits_);
    return *this;
  }
  ~Var() {
    if (detail::VarState* s = state()) detail::var_release(s);
  }

  explicit operator bool() const noexcept { return state() != nullptr; }
  // A number unique among the vars of the process, stable for the var's life (0 for null).
  std::uint64_t id() const noexcept { return state() ? detail::var_id(state()) : 0; }
  detail::VarState* state() const noexcept {
    return reinterpret_cast<detail::VarState*>(bits_ & ~kModeMask);
  }
  // plain, or how commute() / reduce() marked this handle for a writes list.
  detail::VarMode mode() const noexcept { return static_cast<detail::VarMode>(bits_ & kModeMask); }

  // The same var (modes are not compared).
  friend bool operator==(const Var& a, const Var& b) noexcept { return a.state() == b.state(); }

  friend Var commute(Var v) noexcept;
  friend Var reduce(Var v) noexcept;

 private:
  // The VarState pointer with the mode in its low bits: VarState is aligned to a cache line,
  // so a handle stays one word (push copies them by the list).
  static constexpr std::uintptr_t kModeMask = 3;
  std::uintptr_t bits_ = 0;
};

// Marks `v`, in a push's writes list, as a commutative update (StarPU's STARPU_COMMUTE,
// OpenMP's mutexinoutset): the op reads and writes v, and the ops of a run of consecutive
// commute accesses to v run one at a time in any order, after the accesses pushed before the
// run and before the next other access. An op waiting for a commute var does not hold a
// worker; several commute vars are taken all at once (no deadlock). Only in a writes list.
//   engine->push([&] { hist += count(chunk); }, {chunk_var}, {depengine::commute(hist_var)});
inline Var commute(Var v) noexcept {
  v.bits_ = (v.bits_ & ~Var::kModeMask) | static_cast<std::uintptr_t>(detail::VarMode::commute);
  return v;
}

// Marks `v`, in a push's writes list, as a contribution to a reduction (StarPU's
// STARPU_REDUX, OpenMP's in_reduction): the ops of a run of consecutive reduce accesses run
// concurrently, each adding into a private buffer of its thread (reduction_buffer), and the
// buffers are combined into v, as a tree, before the next other access to v or at wait_all.
// The var needs its hooks first (Engine::set_reduction). Only in a writes list, only for
// synchronous CPU ops, never together with another access to the same var in one op.
//   engine->push([&] { *depengine::reduction_buffer<long>(sum) += x; }, {}, {depengine::reduce(sum)});
inline Var reduce(Var v) noexcept {
  v.bits_ = (v.bits_ & ~Var::kModeMask) | static_cast<std::uintptr_t>(detail::VarMode::reduce);
  return v;
}

// A non-owning view of vars, built from a braced list or a vector, so that
// `push(fn, {a, b}, {c})` and `push(fn, reads, writes)` both work. Valid for the call only.
class VarList {
 public:
  VarList() noexcept = default;
  VarList(std::initializer_list<Var> l) noexcept : vars_(l.begin(), l.size()) {}
  VarList(const std::vector<Var>& v) noexcept : vars_(v) {}
  VarList(std::span<const Var> s) noexcept : vars_(s) {}

  auto begin() const noexcept { return vars_.begin(); }
  auto end() const noexcept { return vars_.end(); }
  std::size_t size() const noexcept { return vars_.size(); }
  const Var& operator[](std::size_t i) const noexcept { return vars_[i]; }

 private:
  std::span<const Var> vars_;
};

}  // namespace depengine
