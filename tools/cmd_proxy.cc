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
#include "tools/cluster_flags.h"
#include "tools/command_registry.h"
#include "tools/security_flags.h"
#include "tools/stop_signal.h"

namespace {

// vLLM toy_proxy_server.py spelling: --prefiller-hosts/--prefiller-ports (paired, or one host
// for all ports).
struct VllmStyleFlags {
  std::vector<std::string> prefiller_hosts, decoder_hosts;
  std::vector<int> prefiller_ports, decoder_ports;
  kvferry::tools::SecurityFlags security;
  kvferry::tools::UpstreamFlags upstream;
  int shutdown_timeout_s = 10;
};

bool AppendHostPorts(const std::vector<std::string>& hosts, const std::vector<int>& ports,
                     const char* what, std::vector<std::string>* urls) {
  if (ports.empty()) return true;
  const std::vector<std::string> h = hosts.empty() ? std::vector<std::string>{"localhost"} : hosts;
  if (h.size() != 1 && h.size() != ports.size()) {
    std::fprintf(stderr, "kvferry proxy: %s hosts and ports differ in number\n", what);
    return false;
  }
  for (size_t i = 0; i < ports.size(); ++i) {
    urls->push_back("http://" + h[h.size() == 1 ? 0 : i] + ":" + std::to_string(ports[i]));
  }
  return true;
}

int RunProxy(kvferry::proxy::ProxyOptions o, const VllmStyleFlags& v) {
  using namespace kvferry;
  if (!AppendHostPorts(v.prefiller_hosts, v.prefiller_ports, "prefiller", &o.prefill_urls) ||
      !AppendHostPorts(v.decoder_hosts, v.decoder_ports, "decoder", &o.decode_urls)) {
    return 2;
  }
  auto api_keys = kvferry::tools::ApiKeyOptionsOf(v.security);
  if (!api_keys.ok()) {
    std::fprintf(stderr, "kvferry proxy: --api-key: %s\n", api_keys.status().ToString().c_str());
    return 2;
  }
  o.api_keys = *api_keys;
  o.tls = kvferry::tools::TlsFilesOf(v.security);
  o.max_connections = v.security.max_connections;
  o.request_read_timeout_ms = kvferry::tools::RequestReadTimeoutMsOf(v.security);
  o.upstream = kvferry::tools::UpstreamAccessOf(v.upstream);
  kvferry::tools::InstallStopHandlers();
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
  KVF_LOG_INFO("kvferry proxy: {}://{}:{} with {}; {}", o.tls.enabled() ? "https" : "http", o.host,
               (*proxy)->port(), kvferry::tools::DescribeMembers(o),
               kvferry::tools::DescribeSecurity(o.api_keys, o.tls));
  int sig = 0;
  while ((sig = kvferry::tools::StopSignal()) == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  KVF_LOG_INFO("kvferry proxy: {}, draining (up to {} s)", strsignal(sig), v.shutdown_timeout_s);
  (*proxy)->Shutdown(int64_t{v.shutdown_timeout_s} * 1000);
  KVF_LOG_INFO("kvferry proxy: stopped");
  return 0;
}

void AddProxy(CLI::App& app) {
  auto o = std::make_shared<kvferry::proxy::ProxyOptions>();
  auto v = std::make_shared<VllmStyleFlags>();
  auto* sub = app.add_subcommand(
      "proxy", "Route OpenAI requests through prefill then decode instances (docs/serving.md)");
  sub->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", o->port, "HTTP port (0: any free port)")->capture_default_str();
  sub->add_option("--prefill", o->prefill_urls, "Prefill instance URLs (http(s)://host:port)")
      ->expected(1, -1);
  sub->add_option("--decode", o->decode_urls, "Decode instance URLs (http(s)://host:port)")
      ->expected(1, -1);
  sub->add_option("--prefiller-hosts", v->prefiller_hosts,
                  "vLLM toy-proxy spelling: prefill hosts (one for all ports, or one per port)");
  sub->add_option("--prefiller-ports", v->prefiller_ports,
                  "vLLM toy-proxy spelling: prefill ports");
  sub->add_option("--decoder-hosts", v->decoder_hosts, "vLLM toy-proxy spelling: decode hosts");
  sub->add_option("--decoder-ports", v->decoder_ports, "vLLM toy-proxy spelling: decode ports");
  sub->add_option("--connect-timeout-ms", o->connect_timeout_ms, "Connect timeout per instance")
      ->capture_default_str();
  sub->add_option("--prefill-timeout-ms", o->prefill_timeout_ms,
                  "Longest wait for a prefill instance's answer")
      ->capture_default_str();
  sub->add_option("--decode-timeout-ms", o->decode_timeout_ms,
                  "Longest wait for a decode instance's first byte and between streamed chunks")
      ->capture_default_str();
  sub->add_option("--shutdown-timeout", v->shutdown_timeout_s,
                  "On SIGTERM/SIGINT, seconds to let running requests finish (new ones get 503); "
                  "streams still running then end with an error event")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  kvferry::tools::AddSecurityFlags(sub, &v->security);
  kvferry::tools::AddUpstreamFlags(sub, &v->upstream);
  kvferry::tools::AddProxyClusterFlags(sub, o.get());
  sub->callback([o, v] { throw CLI::RuntimeError(RunProxy(*o, *v)); });
}
KVF_REGISTER_COMMAND(AddProxy);

}  // namespace
