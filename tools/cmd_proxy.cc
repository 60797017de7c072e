// `kvferry proxy`: routes OpenAI requests P -> D (docs/serving.md).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvferry/common/logging.h"
#include "kvferry/proxy/proxy_server.h"
#include "tools/command_registry.h"

namespace {

// SIGINT/SIGTERM set a flag the main thread polls. A handler rather than sigwait: threads that
// libraries start before main() (OpenBLAS, UCX) do not block the signals, and a second SIGTERM
// delivered to one of them must not kill the process mid-drain.
std::atomic<int> g_stop_signal{0};
void OnStopSignal(int sig) { g_stop_signal.store(sig); }
void InstallStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int RunProxy(const kvferry::proxy::ProxyOptions& o) {
  using namespace kvferry;
  InstallStopHandlers();
  auto proxy = proxy::ProxyServer::Create(o);
  if (!proxy.ok()) {
    std::fprintf(stderr, "kvferry proxy: %s\n", proxy.status().ToString().c_str());
    return 2;
  }
  Status s = (*proxy)->Start();
  if (!s.ok()) {
    std::fprintf(stderr, "kvferry proxy: %s\n", s.ToString().c_str());
    return 2;
  }
  KVF_LOG_INFO("kvferry proxy: http://{}:{} with {} prefill and {} decode instances", o.host,
               (*proxy)->port(), o.prefill_urls.size(), o.decode_urls.size());
  int sig = 0;
  while ((sig = g_stop_signal.load()) == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  KVF_LOG_INFO("kvferry proxy: {}, stopping", strsignal(sig));
  (*proxy)->Stop();
  return 0;
}

void AddProxy(CLI::App& app) {
  auto o = std::make_shared<kvferry::proxy::ProxyOptions>();
  auto* sub = app.add_subcommand(
      "proxy", "Route OpenAI requests through prefill then decode instances (docs/serving.md)");
  sub->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", o->port, "HTTP port (0: any free port)")->capture_default_str();
  sub->add_option("--prefill", o->prefill_urls, "Prefill instance URLs (http://host:port)")
      ->required()
      ->expected(1, -1);
  sub->add_option("--decode", o->decode_urls, "Decode instance URLs (http://host:port)")
      ->required()
      ->expected(1, -1);
  sub->add_option("--connect-timeout-ms", o->connect_timeout_ms, "Connect timeout per instance")
      ->capture_default_str();
  sub->add_option("--prefill-timeout-ms", o->prefill_timeout_ms,
                  "Longest wait for a prefill instance's answer")
      ->capture_default_str();
  sub->add_option("--decode-timeout-ms", o->decode_timeout_ms,
                  "Longest wait for a decode instance's first byte and between streamed chunks")
      ->capture_default_str();
  sub->add_option("--num-http-threads", o->num_http_threads, "Concurrent client connections")
      ->capture_default_str();
  sub->callback([o] { throw CLI::RuntimeError(RunProxy(*o)); });
}
KVF_REGISTER_COMMAND(AddProxy);

}  // namespace
