// kvf_fault_node: one serving process for the fault, bad-input and load tests (tests/fault,
// tests/load): an OpenAI server over an EngineLoop (optionally with a FerryConnector), or the
// proxy. It exists so these tests run real processes (kill -9, SIGSTOP, network namespaces)
// without depending on the `kvferry serve` / `kvferry proxy` command lines.
//
//   kvf_fault_node serve [--host H] [--port P] [--model tiny] [--num-kv-blocks N]
//                        [--kv-transfer-config JSON] [--max-connections N]
//                        [--request-read-timeout SECONDS]  (also the proxy's)
//   kvf_fault_node proxy [--host H] [--port P] --prefill URL --decode URL
//                        [--prefill-timeout-ms N] [--decode-timeout-ms N]
//
// Once listening it prints "PORT <http port>" (and "SIDE_CHANNEL <port>" for a connector) on
// stdout, then serves until SIGTERM or SIGINT.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "kvferry/connector/kv_transfer_config.h"
#include "kvferry/server/engine_loop.h"
#include "kvferry/server/openai_server.h"
#include "kvferry/server/server_metrics.h"
#ifdef KVF_FAULT_NODE_PROXY
#include "kvferry/proxy/proxy_server.h"
#endif

namespace {

using namespace kvferry;

int Fail(const std::string& what) {
  std::fprintf(stderr, "kvf_fault_node: %s\n", what.c_str());
  return 1;
}

void WaitForTermination() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig = 0;
  sigwait(&set, &sig);
}

std::string Get(const std::map<std::string, std::string>& a, const std::string& k,
                const std::string& def) {
  auto it = a.find(k);
  return it == a.end() ? def : it->second;
}

// --request-read-timeout SECONDS (default: the front ends' own, 30 s) in milliseconds.
int64_t ReadTimeoutMs(const std::map<std::string, std::string>& a) {
  return static_cast<int64_t>(std::atof(Get(a, "--request-read-timeout", "30").c_str()) * 1000.0);
}

int Serve(const std::map<std::string, std::string>& args) {
  server::EngineLoopOptions opts;
  opts.engine.model = Get(args, "--model", "tiny");
  opts.engine.num_kv_blocks = std::atoi(Get(args, "--num-kv-blocks", "0").c_str());
  opts.engine.num_threads = 1;
  opts.engine.max_model_len = std::atoi(Get(args, "--max-model-len", "0").c_str());
  std::string kv = Get(args, "--kv-transfer-config", "");
  if (!kv.empty()) {
    auto cfg = connector::ParseKvTransferConfig(kv);
    if (!cfg.ok()) return Fail(cfg.status().ToString());
    opts.kv_transfer = *cfg;
  }
  server::ServerMetrics metrics;
  auto loop = server::EngineLoop::Start(opts, &metrics);
  if (!loop.ok()) return Fail(loop.status().ToString());
  server::ServerOptions sopts;
  sopts.host = Get(args, "--host", "127.0.0.1");
  sopts.port = std::atoi(Get(args, "--port", "0").c_str());
  sopts.request_timeout_ms = std::atoll(Get(args, "--request-timeout-ms", "60000").c_str());
  sopts.first_output_timeout_ms = sopts.request_timeout_ms;
  sopts.max_connections = std::atoi(Get(args, "--max-connections", "1024").c_str());
  sopts.request_read_timeout_ms = ReadTimeoutMs(args);
  server::OpenAiServer http(sopts, loop->get(), &metrics);
  Status s = http.Start();
  if (!s.ok()) return Fail(s.ToString());
  std::printf("PORT %d\n", http.port());
  if ((*loop)->side_channel_port() != 0) {
    std::printf("SIDE_CHANNEL %d\nENGINE_ID %s\n", (*loop)->side_channel_port(),
                (*loop)->engine_id().c_str());
  }
  std::fflush(stdout);
  WaitForTermination();
  http.BeginDrain();
  (*loop)->Stop(2000);
  http.Stop();
  return 0;
}

int Proxy(const std::map<std::string, std::string>& args) {
#ifdef KVF_FAULT_NODE_PROXY
  proxy::ProxyOptions opts;
  opts.host = Get(args, "--host", "127.0.0.1");
  opts.port = std::atoi(Get(args, "--port", "0").c_str());
  opts.prefill_urls = {Get(args, "--prefill", "")};
  opts.decode_urls = {Get(args, "--decode", "")};
  opts.prefill_timeout_ms = std::atoll(Get(args, "--prefill-timeout-ms", "20000").c_str());
  opts.decode_timeout_ms = std::atoll(Get(args, "--decode-timeout-ms", "30000").c_str());
  opts.request_read_timeout_ms = ReadTimeoutMs(args);
  auto p = proxy::ProxyServer::Create(opts);
  if (!p.ok()) return Fail(p.status().ToString());
  Status s = (*p)->Start();
  if (!s.ok()) return Fail(s.ToString());
  std::printf("PORT %d\n", (*p)->port());
  std::fflush(stdout);
  WaitForTermination();
  (*p)->Shutdown(std::atoll(Get(args, "--shutdown-timeout-ms", "10000").c_str()));
  return 0;
#else
  return Fail("built without the proxy library");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  // Block the termination signals in every thread; the main thread takes them with sigwait.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  if (argc < 2) return Fail("usage: kvf_fault_node serve|proxy [--flag value]...");
  std::map<std::string, std::string> args;
  for (int i = 2; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  std::string mode = argv[1];
  if (mode == "serve") return Serve(args);
  if (mode == "proxy") return Proxy(args);
  return Fail("unknown mode " + mode);
}
