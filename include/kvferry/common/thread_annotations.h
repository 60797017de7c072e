// Clang thread-safety annotations (no-ops on other compilers) and an annotated mutex.
//
// libstdc++'s std::mutex carries no capability attributes, so members are guarded by
// kvferry::Mutex and locked with kvferry::MutexLock; `make tsa` builds with
// -Wthread-safety -Werror=thread-safety.
#pragma once

#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define KVF_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define KVF_THREAD_ANNOTATION_(x)
#endif

#define CAPABILITY(x) KVF_THREAD_ANNOTATION_(capability(x))
#define SCOPED_CAPABILITY KVF_THREAD_ANNOTATION_(scoped_lockable)
#define GUARDED_BY(x) KVF_THREAD_ANNOTATION_(guarded_by(x))
#define PT_GUARDED_BY(x) KVF_THREAD_ANNOTATION_(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) KVF_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
#define REQUIRES(...) KVF_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) KVF_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define RELEASE(...) KVF_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) KVF_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) KVF_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) KVF_THREAD_ANNOTATION_(assert_capability(x))
#define NO_THREAD_SAFETY_ANALYSIS KVF_THREAD_ANNOTATION_(no_thread_safety_analysis)

namespace kvferry {

// A std::mutex the analysis understands. Not copyable, not movable.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

  // For std::condition_variable_any and friends.
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// RAII lock for Mutex.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

// Condition variable usable with Mutex. Wait* must be called with `mu` held; every wait in
// kvferry has a deadline, so only timed waits are offered.
class CondVar {
 public:
  template <typename Clock, typename Duration, typename Pred>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline, Pred pred)
      REQUIRES(mu) {
    return cv_.wait_until(*mu, deadline, pred);
  }
  template <typename Rep, typename Period, typename Pred>
  bool WaitFor(Mutex* mu, const std::chrono::duration<Rep, Period>& d, Pred pred) REQUIRES(mu) {
    return cv_.wait_for(*mu, d, pred);
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

}  // namespace kvferry
