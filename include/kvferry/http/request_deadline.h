// RequestDeadline: how long a client of the two HTTP front ends (`kvferry serve`, `kvferry
// proxy`) may take to send a request, headers and body, before its connection is cut.
//
// httplib 0.11's read timeout applies to each read, so a client that sends one byte every few
// seconds (slowloris: half a request, then a header line at a time; or a body trickled a byte at
// a time) keeps its connection, and its thread, for as long as it likes; as many such clients
// as --max-connections make every later client wait (docs/reliability.md, "Slow and idle
// clients"). Here a request must have arrived whole within `timeout` of the moment its
// connection was accepted or its previous response was written; otherwise it is answered 408
// (plain HTTP; a TLS connection is only closed, since the bytes would have to go through its
// session) and the connection is shut down. Once a request has arrived (its route handler runs)
// the clock stops until its response is written: a long generation or stream is never cut.
//
// How: a watch thread lists, every `scan_interval`, the connected sockets of this process on
// the listener's port (/proc/self/fd), keyed by the client's address and port, which is also
// how the request names them (Request::remote_addr, remote_port); Arrived() and the server's
// logger (called once a response is written) move a connection between "reading" and
// "answering". A connection is first seen at a scan, so the deadline is kept to within one
// scan interval (late, never early).
//
// Thread-safety: Arrived(), OnResponseWritten() and timed_out_total() are called from any
// thread (the connection threads); Install(), Start() and Stop() from the front end's owner.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "kvferry/common/thread_annotations.h"

namespace kvferry::http {

class RequestDeadline {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::chrono::milliseconds timeout{30000};  // 0: no deadline (and no watch thread)
    bool plaintext = true;                     // false for TLS: cut without a 408
    std::chrono::milliseconds scan_interval{250};
  };

  explicit RequestDeadline(Options options);
  ~RequestDeadline();
  RequestDeadline(const RequestDeadline&) = delete;
  RequestDeadline& operator=(const RequestDeadline&) = delete;

  // Sets `http`'s logger (the response-written hook). Call before the server listens.
  void Install(httplib::Server& http);
  // `handler`, first telling the deadline that its request arrived. Wrap every route.
  httplib::Server::Handler Guard(httplib::Server::Handler handler);
  // Starts watching the connections accepted on `port` (the listener's bound port).
  void Start(int port) EXCLUDES(mu_);
  void Stop() EXCLUDES(mu_);

  void Arrived(const httplib::Request& req) EXCLUDES(mu_);
  void OnResponseWritten(const httplib::Request& req) EXCLUDES(mu_);
  // Connections cut because their request did not arrive in time, since start.
  int64_t timed_out_total() const { return timed_out_total_.load(); }

 private:
  struct Conn {
    bool answering = false;   // its request arrived; its response is not yet written
    Clock::time_point since;  // reading since (accepted, or the previous response written)
    bool seen = false;        // found by the latest scan
    bool cut = false;         // shut down for being late
  };
  void Loop() EXCLUDES(mu_);
  void Scan(Clock::time_point now) EXCLUDES(mu_);
  void Cut(int fd, const std::string& key);

  const Options options_;
  int port_ = 0;
  std::thread thread_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::map<std::string, Conn> conns_ GUARDED_BY(mu_);  // by "address port" of the client
  std::atomic<int64_t> timed_out_total_{0};
};

// The Prometheus text of the counter (kvferry:http_request_read_timeouts_total), appended to
// both front ends' /metrics.
std::string RequestDeadlineMetricsText(const RequestDeadline& deadline);

}  // namespace kvferry::http
