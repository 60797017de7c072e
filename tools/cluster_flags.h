// The cluster flags of `kvferry serve` (--registry: register this instance in etcd) and
// `kvferry proxy` (--registry: find the instances there; routing and retry knobs), kept out of
// cmd_serve.cc and cmd_proxy.cc so those stay about their command (docs/deploy.md, "Running a
// cluster").
//
// Thread-safety: called from the main thread while the command line is parsed and the command
// starts.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "kvferry/cluster/registrar.h"
#include "kvferry/common/status.h"
#include "kvferry/proxy/proxy_server.h"
#include "kvferry/server/engine_loop.h"

namespace kvferry::tools {

struct ServeRegistryFlags {
  std::string registry;  // etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]
  int ttl_s = 10;
  std::string advertise_host;  // the address proxies use; default --host
  std::string cluster_role;    // prefill|decode|both; "" from kv_role
};

void AddServeRegistryFlags(CLI::App* serve, ServeRegistryFlags* flags);

// What a running instance registers: its role (from kv_role), URL, engine id, side channel,
// served model name, TP size and KV capacity. Null when --registry is not given;
// InvalidArgument when the instance cannot be described (no --kv-transfer-config, or a wildcard
// --host without --advertise-host).
struct ServedInstance {
  const server::EngineLoopOptions* loop_options;
  const server::EngineLoop* loop;
  std::string host;
  int port = 0;
  bool https = false;  // it listens with TLS
  std::string model;
};
StatusOr<std::unique_ptr<cluster::Registrar>> StartServeRegistration(
    const ServeRegistryFlags& flags, const ServedInstance& instance);

void AddProxyClusterFlags(CLI::App* proxy, proxy::ProxyOptions* options);
// "registry etcd://..." or "N prefill and M decode instances", for the proxy's first log line.
std::string DescribeMembers(const proxy::ProxyOptions& options);

}  // namespace kvferry::tools
