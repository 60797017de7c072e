// ConnectionThreads: the task queue of the two HTTP front ends (`kvferry serve`, `kvferry
// proxy`): one thread per open connection, up to `max_connections` at once.
//
// httplib runs each accepted connection as one task, start to close: it reads a request, answers
// it, and waits for the next on a kept-alive connection, all on the thread that took the task.
// httplib 0.11's own ThreadPool has a fixed number of threads and an unbounded queue behind them,
// so as many idle clients as threads (kept-alive connections between requests, or clients that
// sent half a request and trickle the rest) hold every thread, and a normal request waits behind
// them until they time out or forever (docs/reliability.md, "Slow and idle clients"). Here every
// connection gets its own thread at once, so an idle one costs a parked thread, not another
// client's wait. Past `max_connections` a connection waits, in arrival order, for one to close
// (counted in `waited_total`): the cap bounds threads and memory, not who is served first.
// Threads idle for 10 s exit, down to 4 kept.
//
// Stopping: httplib calls shutdown() once its accept loop ended. What is queued still runs, and
// the connections get 1 s to finish; then every socket of this process whose local port is the
// listener's (SetListenPort) is shut down (shutdown(2), not closed: httplib still owns the
// descriptor), so a client idling on a kept-alive connection or trickling a request cannot keep
// the server from stopping, then every thread is joined.
//
// Thread-safety: enqueue() is httplib's accept thread's; shutdown() is called once, by httplib;
// SetListenPort() and load() may be called from any thread.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvferry/common/thread_annotations.h"

namespace kvferry::http {

struct ConnectionLoad {
  int64_t open = 0;          // connections being served (each on its thread)
  int64_t waiting = 0;       // accepted, waiting for a thread (over the cap)
  int64_t threads = 0;       // threads alive, busy or parked
  int64_t waited_total = 0;  // connections that had to wait, since start
};

// The three figures as Prometheus text (kvferry:http_connections{state="open"|"waiting"},
// kvferry:http_connections_waited_total), appended to both front ends' /metrics.
std::string ConnectionMetricsText(const ConnectionLoad& load);

class ConnectionThreads final : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(int max_connections);
  ~ConnectionThreads() override;
  ConnectionThreads(const ConnectionThreads&) = delete;
  ConnectionThreads& operator=(const ConnectionThreads&) = delete;

  void enqueue(std::function<void()> fn) override EXCLUDES(mu_);
  void shutdown() override EXCLUDES(mu_);
  ConnectionLoad load() const EXCLUDES(mu_);
  // The port the server's connections are accepted on (what shutdown() cuts); 0: none.
  void SetListenPort(int port) EXCLUDES(mu_);

  // httplib deletes what new_task_queue returned once its accept loop ends. A front end that
  // reads load() for /metrics keeps the ConnectionThreads itself and gives httplib this handle,
  // which forwards to it: http.new_task_queue = [q] { return ConnectionThreads::Handle(q); }.
  static httplib::TaskQueue* Handle(std::shared_ptr<ConnectionThreads> threads);

 private:
  void Run() EXCLUDES(mu_);
  void JoinExitedLocked() REQUIRES(mu_);
  size_t LiveThreadsLocked() const REQUIRES(mu_) { return threads_.size() - exited_.size(); }

  const size_t max_threads_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  std::list<std::thread> threads_ GUARDED_BY(mu_);
  std::vector<std::thread::id> exited_ GUARDED_BY(mu_);  // returned from Run(), not yet joined
  size_t idle_ GUARDED_BY(mu_) = 0;                      // threads parked in Run()
  int64_t busy_ GUARDED_BY(mu_) = 0;
  int64_t waited_total_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;
  int listen_port_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvferry::http
