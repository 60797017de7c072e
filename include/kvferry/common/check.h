// Always-on checks of invariants: conditions that, when false, mean kvferry itself has a bug and
// the state it guards (the block pool's ref counts and free queue, a request's block table) can
// no longer be trusted. Unlike assert(), they do not depend on the build: NDEBUG (a Release build,
// or a packager's own flags; this project's RelWithDebInfo keeps assert) removes assert() but not
// these. A broken ref count found here costs one crash that names file and line; the same count
// carried on silently hands one request's KV blocks to another.
//
//   KVF_CHECK(blk.in_free_queue);
//   KVF_CHECK(j >= 0 && j < n, "kernel block {} of {}", j, n);   // fmt-style message
//   KVF_CHECK_OK(pool_.Free(ids));                               // a Status that must be OK
//
// A failed check writes "file:line: KVF_CHECK failed: <condition>[: <message>]" (for
// KVF_CHECK_OK, the Status) straight to stderr, whatever the log level, and aborts. Not for what
// a caller can cause or recover from: that is a Status. A check's condition is evaluated exactly
// once; the message only when the check fails.
//
// Thread-safety: may be used from any thread.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>

#include "kvferry/common/status.h"

namespace kvferry::check_internal {

// Reports the failed check (see above) and aborts. Out of line, so a check costs its caller one
// compare and a call it never takes.
[[noreturn]] void Fail(const char* file, int line, std::string_view macro,
                       std::string_view condition, std::string_view detail);

inline std::string Message() { return {}; }
template <typename... Args>
std::string Message(fmt::format_string<Args...> format, Args&&... args) {
  return fmt::format(format, std::forward<Args>(args)...);
}

}  // namespace kvferry::check_internal

#define KVF_CHECK(cond, ...)                                                     \
  (__builtin_expect(static_cast<bool>(cond), 1)                                  \
       ? static_cast<void>(0)                                                    \
       : ::kvferry::check_internal::Fail(__FILE__, __LINE__, "KVF_CHECK", #cond, \
                                         ::kvferry::check_internal::Message(__VA_ARGS__)))

#define KVF_CHECK_OK(expr)                                                       \
  do {                                                                           \
    const ::kvferry::Status kvf_check_status_ = (expr);                          \
    if (__builtin_expect(!kvf_check_status_.ok(), 0)) {                          \
      ::kvferry::check_internal::Fail(__FILE__, __LINE__, "KVF_CHECK_OK", #expr, \
                                      kvf_check_status_.ToString());             \
    }                                                                            \
  } while (0)
