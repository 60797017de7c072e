#include "e2e_process.h"

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

extern char** environ;

namespace kvferry::e2e {
namespace {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string KvferryBinary() { return KVF_KVFERRY_BIN; }

nlohmann::json TestKvTransferConfig(const std::string& engine_id, const std::string& transfer,
                                    bool host_buffer) {
  nlohmann::json kv = {
      {"kv_connector", "FerryConnector"},
      {"kv_role", "kv_both"},
      {"engine_id", engine_id},
      {"kv_connector_extra_config",
       {{"side_channel_host", "127.0.0.1"}, {"side_channel_port", 0}, {"backend", transfer}}}};
  if (host_buffer) kv["kv_buffer_device"] = "cpu";
  return kv;
}

KvferryProcess::KvferryProcess(const std::string& name, const std::vector<std::string>& args,
                               const std::string& log_dir, int timeout_ms)
    : name_(name), log_path_(log_dir + "/" + name + ".log") {
  std::vector<std::string> argv_s = {KvferryBinary()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log_path_.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    pid_ = -1;
    error_ = name + ": posix_spawn failed: " + std::to_string(rc);
    return;
  }
  const std::regex port_re("kvferry [a-z]+: http://127\\.0\\.0\\.1:([0-9]+)");
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int port = 0;
  while (Clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      error_ = name + " exited during startup:\n" + LogTail();
      return;
    }
    std::smatch m;
    const std::string log = ReadFile(log_path_);
    if (port == 0 && std::regex_search(log, m, port_re)) port = std::stoi(m[1]);
    if (port > 0) {
      httplib::Client c("127.0.0.1", port);
      c.set_connection_timeout(std::chrono::seconds(2));
      c.set_read_timeout(std::chrono::seconds(2));
      auto r = c.Get("/health");
      if (r && r->status == 200) {
        port_ = port;
        return;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  error_ = name + " not healthy within " + std::to_string(timeout_ms) + " ms:\n" + LogTail();
}

KvferryProcess::~KvferryProcess() { Stop(); }

void KvferryProcess::Terminate() {
  if (pid_ > 0) kill(pid_, SIGTERM);
}

bool KvferryProcess::Stop(int timeout_ms) {
  if (pid_ <= 0) return true;
  kill(pid_, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  while (Clock::now() < deadline) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
      error_ = name_ +
               (WIFEXITED(status) ? " exited with status " + std::to_string(WEXITSTATUS(status))
                                  : " killed by signal " + std::to_string(WTERMSIG(status))) +
               ":\n" + LogTail();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
  error_ = name_ + " did not exit within " + std::to_string(timeout_ms) + " ms of SIGTERM:\n" +
           LogTail();
  return false;
}

std::string KvferryProcess::LogTail() const {
  const std::string log = ReadFile(log_path_);
  return log.size() > 3000 ? log.substr(log.size() - 3000) : log;
}

std::optional<nlohmann::json> Post(int port, const std::string& path, const nlohmann::json& body,
                                   int timeout_s) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(std::chrono::seconds(5));
  c.set_read_timeout(std::chrono::seconds(timeout_s));
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  if (!r) return std::nullopt;
  nlohmann::json out;
  if (body.value("stream", false) && r->status == 200) {
    std::string text;
    nlohmann::json ids = nlohmann::json::array(), lps = nlohmann::json::array();
    std::string finish;
    nlohmann::json kv_load;  // on the final chunk
    nlohmann::json usage;
    size_t pos = 0;
    while ((pos = r->body.find("data: ", pos)) != std::string::npos) {
      const size_t end = r->body.find("\n\n", pos);
      const std::string data = r->body.substr(pos + 6, end - pos - 6);
      pos = end;
      if (data == "[DONE]") break;
      nlohmann::json ev = nlohmann::json::parse(data, nullptr, false);
      if (!ev.is_discarded() && ev.contains("usage") && ev["usage"].is_object()) {
        usage = ev["usage"];  // stream_options.include_usage: a last chunk without choices
      }
      if (ev.is_discarded() || !ev.contains("choices") || ev["choices"].empty()) continue;
      const nlohmann::json& ch = ev["choices"][0];
      text += ch.value("text", "");
      if (ch.contains("delta") && ch["delta"]["content"].is_string()) {
        text += ch["delta"]["content"].get<std::string>();  // a chat chunk
      }
      for (const auto& id : ch.value("token_ids", nlohmann::json::array())) ids.push_back(id);
      if (ch["logprobs"].is_object() && ch["logprobs"].contains("token_logprobs")) {
        for (const auto& lp : ch["logprobs"]["token_logprobs"]) lps.push_back(lp);
      } else if (ch["logprobs"].is_object() && ch["logprobs"].contains("content")) {
        for (const auto& t : ch["logprobs"]["content"]) lps.push_back(t["logprob"]);
      }
      if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
      if (ev.contains("kv_load")) kv_load = ev["kv_load"];
    }
    out = {{"choices",
            {{{"text", text},
              {"token_ids", ids},
              {"logprobs", {{"token_logprobs", lps}}},
              {"finish_reason", finish}}}}};
    if (!kv_load.is_null()) out["kv_load"] = kv_load;
    if (!usage.is_null()) out["usage"] = usage;
  } else {
    out = nlohmann::json::parse(r->body, nullptr, false);
    if (out.is_discarded()) out = {{"raw", r->body}};
  }
  out["_status"] = r->status;
  return out;
}

double Metric(int port, const std::string& sample) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(std::chrono::seconds(5));
  auto r = c.Get("/metrics");
  if (!r) return -1;
  std::istringstream in(r->body);
  for (std::string line; std::getline(in, line);) {
    if (line.size() > sample.size() && line.compare(0, sample.size(), sample) == 0 &&
        line[sample.size()] == ' ') {
      return std::stod(line.substr(sample.size() + 1));
    }
  }
  return -1;
}

}  // namespace kvferry::e2e
