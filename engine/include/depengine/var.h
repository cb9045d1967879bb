// depengine/var.h — Var, the handle to anything whose accesses the engine orders.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

namespace depengine {

namespace detail {
struct VarState;
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
  explicit Var(detail::VarState* s) noexcept : s_(s) {}
  Var(const Var& o) noexcept : s_(o.s_) {
    if (s_) detail::var_add_ref(s_);
  }
  Var(Var&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  Var& operator=(const Var& o) noexcept {
    Var tmp(o);
    std::swap(s_, tmp.s_);
    return *this;
  }
  Var& operator=(Var&& o) noexcept {
    Var tmp(std::move(o));
    std::swap(s_, tmp.s_);
    return *this;
  }
  ~Var() {
    if (s_) detail::var_release(s_);
  }

  explicit operator bool() const noexcept { return s_ != nullptr; }
  // A number unique among the vars of the process, stable for the var's life (0 for null).
  std::uint64_t id() const noexcept { return s_ ? detail::var_id(s_) : 0; }
  detail::VarState* state() const noexcept { return s_; }

  friend bool operator==(const Var& a, const Var& b) noexcept { return a.s_ == b.s_; }

 private:
  detail::VarState* s_ = nullptr;
};

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
