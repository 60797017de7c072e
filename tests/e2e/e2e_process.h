// Test helpers for end-to-end tests: a child `kvferry` process on loopback, HTTP calls to it, and
// deterministic prompts.
//
// A KvferryProcess is started with --port 0 (and side channel port 0), so tests never collide on
// ports; the port is read from the process's log line "kvferry serve: http://127.0.0.1:PORT ...".
// The destructor stops the process (SIGTERM, then SIGKILL after a deadline) and waits for it.
//
// Thread-safety: a KvferryProcess is used from the thread that made it; Complete() may be called
// from any thread.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace kvferry::e2e {

class KvferryProcess {
 public:
  // Spawns `kvferry args...`, logging to a file under `log_dir`; waits (up to `timeout_ms`) until
  // it logged its port and /health answers 200. On failure, ok() is false and error() says why
  // (with the log's tail).
  KvferryProcess(const std::string& name, const std::vector<std::string>& args,
                 const std::string& log_dir, int timeout_ms = 30000);
  ~KvferryProcess();
  KvferryProcess(const KvferryProcess&) = delete;
  KvferryProcess& operator=(const KvferryProcess&) = delete;

  bool ok() const { return port_ > 0; }
  const std::string& error() const { return error_; }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // SIGTERM; true when the process exited (status 0) within `timeout_ms`.
  bool Stop(int timeout_ms = 10000);
  // Sends SIGTERM without waiting (Stop() then waits).
  void Terminate();
  std::string LogTail() const;

 private:
  std::string name_;
  std::string log_path_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string error_;
};

// POSTs `body` to 127.0.0.1:port `path`. Returns the parsed JSON answer with "_status" added,
// or nullopt when the connection failed. With "stream": true, the server-sent events are
// folded into one completion-shaped object: choices[0].text (a chat stream's delta contents),
// token_ids, logprobs.token_logprobs (a chat stream's logprobs.content[].logprob), the final
// chunk's "kv_load" and the "usage" chunk when they are sent.
std::optional<nlohmann::json> Post(int port, const std::string& path, const nlohmann::json& body,
                                   int timeout_s = 60);

// The value of one Prometheus sample ("name{labels}") from /metrics, or -1.
double Metric(int port, const std::string& sample);

// A --kv-transfer-config for a test instance: kv_both, `engine_id`, the side channel on an
// ephemeral loopback port, `transfer` ("ucx" or "socket"), the host buffer when asked.
nlohmann::json TestKvTransferConfig(const std::string& engine_id, const std::string& transfer,
                                    bool host_buffer);

// The path of the kvferry binary under test.
std::string KvferryBinary();

// Deterministic printable prompt of `len` bytes; prompts with the same seed share prefixes.
inline std::string Prompt(int len, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> c(32, 126);
  std::string s;
  for (int i = 0; i < len; ++i) s += static_cast<char>(c(rng));
  return s;
}

}  // namespace kvferry::e2e
