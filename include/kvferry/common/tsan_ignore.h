// TsanIgnoreScope: while it lives, ThreadSanitizer ignores this thread's memory and descriptor
// accesses; outside a TSan build it is nothing. For the few places whose ordering TSan cannot
// see and which are right by construction, each saying why where it is used:
//   - the socket backend's send/recv of registered memory, ordered through the peer process
//     (transfer/backends/socket/socket_io.cc);
//   - listing this process's sockets by descriptor (http/port_sockets.cc), which touches
//     descriptors other threads own without synchronising with them: fstat/getsockname on a
//     descriptor being opened or closed meanwhile just fails or names another socket, which the
//     callers check for.
//
// Thread-safety: per thread.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define KVF_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVF_TSAN 1
#endif
#endif

#ifdef KVF_TSAN
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

namespace kvferry {

class TsanIgnoreScope {
 public:
#ifdef KVF_TSAN
  TsanIgnoreScope() { __tsan_ignore_thread_begin(); }
  ~TsanIgnoreScope() { __tsan_ignore_thread_end(); }
#else
  TsanIgnoreScope() = default;
#endif
  TsanIgnoreScope(const TsanIgnoreScope&) = delete;
  TsanIgnoreScope& operator=(const TsanIgnoreScope&) = delete;
};

}  // namespace kvferry
