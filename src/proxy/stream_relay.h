// StreamRelay (proxy-internal): one upstream POST whose response body is read on a background
// thread and handed over chunk by chunk, so the proxy can learn the upstream status before it
// commits its own, then pass a server-sent-event stream through as it arrives.
//
// Thread-safety: the methods are called by one thread (the proxy handler / its stream
// provider); the background thread synchronises through the mutex.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "kvferry/common/deadline.h"
#include "kvferry/common/status.h"
#include "kvferry/common/thread_annotations.h"
#include "kvferry/proxy/upstream.h"

namespace httplib {
class Client;
}

namespace kvferry::proxy {

struct RelayTimeouts {
  int64_t connect_timeout_ms = 2000;
  int64_t read_timeout_ms = 300000;  // the longest silence between two chunks
};

class StreamRelay {
 public:
  StreamRelay(UpstreamUrl upstream, const UpstreamAccess& access, std::string path,
              std::string request_id, std::string body, RelayTimeouts timeouts);
  ~StreamRelay();  // cancels and joins
  StreamRelay(const StreamRelay&) = delete;
  StreamRelay& operator=(const StreamRelay&) = delete;

  // The upstream's HTTP status, once its headers arrived; its failure as a Status otherwise,
  // DeadlineExceeded when `deadline` passes first.
  StatusOr<int> WaitStatus(Deadline deadline);
  std::string content_type();

  // The next body chunk; nullopt at the end of the body. An error when the upstream failed
  // mid-body or nothing arrived before `deadline`.
  StatusOr<std::optional<std::string>> NextChunk(Deadline deadline);

  // True once NextChunk would answer at once (a chunk, the end, or the failure); false when
  // `deadline` passed first.
  bool WaitReady(Deadline deadline);

  // The rest of the body, concatenated (for error answers).
  StatusOr<std::string> ReadAll(Deadline deadline);

  // Stops reading; the upstream sees the connection close.
  void Cancel();

 private:
  void Run(std::string path, std::string request_id, std::string body);

  const UpstreamUrl upstream_;
  std::unique_ptr<httplib::Client> client_;
  Mutex mu_;
  CondVar cv_;
  int status_ GUARDED_BY(mu_) = 0;
  std::string content_type_ GUARDED_BY(mu_);
  std::deque<std::string> chunks_ GUARDED_BY(mu_);
  bool finished_ GUARDED_BY(mu_) = false;
  bool cancelled_ GUARDED_BY(mu_) = false;
  Status error_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kvferry::proxy
