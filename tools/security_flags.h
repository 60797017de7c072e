// The security flags `kvferry serve` and `kvferry proxy` share (docs/deploy.md), spelled as
// vLLM spells them: --api-key (repeatable; the environment variable KVFERRY_API_KEY adds
// comma-separated keys, so keys need not appear on a command line others can read),
// --api-key-scope, --ssl-certfile, --ssl-keyfile; and the proxy's upstream flags,
// --upstream-api-key (or KVFERRY_UPSTREAM_API_KEY) and --ssl-ca-certs. Keys are never logged.
// With them, the limits of a public endpoint: --max-connections (a thread each;
// http/connection_threads.h) and --request-read-timeout (http/request_deadline.h).
//
// Thread-safety: used while the command line is parsed and the server set up (main thread).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/http/api_key.h"
#include "kvferry/http/tls_server.h"
#include "kvferry/proxy/upstream.h"

namespace kvferry::tools {

struct SecurityFlags {
  std::vector<std::string> api_keys;
  std::string api_key_scope = "v1";
  std::string ssl_certfile;
  std::string ssl_keyfile;
  int max_connections = 1024;
  double request_read_timeout_s = 30;
};

struct UpstreamFlags {
  std::string upstream_api_key;
  std::string ssl_ca_certs;
};

void AddSecurityFlags(CLI::App* sub, SecurityFlags* flags);
void AddUpstreamFlags(CLI::App* sub, UpstreamFlags* flags);

// The keys of --api-key plus those of KVFERRY_API_KEY, and the scope. InvalidArgument for an
// unknown scope.
StatusOr<http::ApiKeyOptions> ApiKeyOptionsOf(const SecurityFlags& flags);
http::TlsServerFiles TlsFilesOf(const SecurityFlags& flags);
int64_t RequestReadTimeoutMsOf(const SecurityFlags& flags);
// --upstream-api-key, else KVFERRY_UPSTREAM_API_KEY; --ssl-ca-certs.
proxy::UpstreamAccess UpstreamAccessOf(const UpstreamFlags& flags);

// "API keys: 2, required on /v1/*; TLS" (what to log at startup; never the keys).
std::string DescribeSecurity(const http::ApiKeyOptions& keys, const http::TlsServerFiles& tls);

// Comma-separated keys, blanks around them trimmed, empty entries dropped.
std::vector<std::string> SplitKeyList(std::string_view text);

}  // namespace kvferry::tools
