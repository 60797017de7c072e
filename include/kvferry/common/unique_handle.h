// RAII ownership of C handles and scope guards.
//
//   using UcpWorker = UniqueHandle<ucp_worker, ucp_worker_destroy>;
//   UcpWorker w(raw);          // destroyed with ucp_worker_destroy when w goes out of scope
//
// Thread-safety: as std::unique_ptr.
#pragma once

#include <memory>
#include <utility>

namespace kvferry {

template <auto Fn>
struct FunctionDeleter {
  template <typename T>
  void operator()(T* p) const {
    if (p) Fn(p);
  }
};

template <typename T, auto DestroyFn>
using UniqueHandle = std::unique_ptr<T, FunctionDeleter<DestroyFn>>;

// Runs `fn` at scope exit unless Dismiss() was called.
template <typename F>
class ScopeExit {
 public:
  explicit ScopeExit(F fn) : fn_(std::move(fn)) {}
  ~ScopeExit() {
    if (active_) fn_();
  }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;
  void Dismiss() { active_ = false; }

 private:
  F fn_;
  bool active_ = true;
};

}  // namespace kvferry
