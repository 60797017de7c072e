#include "tools/security_flags.h"

#include <cstdlib>

namespace kvferry::tools {
namespace {

constexpr const char* kApiKeyEnv = "KVFERRY_API_KEY";
constexpr const char* kUpstreamApiKeyEnv = "KVFERRY_UPSTREAM_API_KEY";

}  // namespace

std::vector<std::string> SplitKeyList(std::string_view text) {
  std::vector<std::string> keys;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view key = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    while (!key.empty() && (key.front() == ' ' || key.front() == '\t')) key.remove_prefix(1);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t' || key.back() == '\n')) {
      key.remove_suffix(1);
    }
    if (!key.empty()) keys.emplace_back(key);
  }
  return keys;
}

void AddSecurityFlags(CLI::App* sub, SecurityFlags* flags) {
  sub->add_option("--max-connections,--num-http-threads", flags->max_connections,
                  "HTTP connections served at once, a thread each; more wait for one to close")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--request-read-timeout", flags->request_read_timeout_s,
                  "Seconds a client has to send a whole request (headers and body) after "
                  "connecting or after its previous answer; later: 408 and closed (0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--api-key", flags->api_keys,
                  "Require 'Authorization: Bearer KEY' with one of these keys on /v1/* "
                  "(repeatable; KVFERRY_API_KEY adds comma-separated keys and keeps them off "
                  "the command line)");
  sub->add_option("--api-key-scope", flags->api_key_scope,
                  "Where keys are required: v1 (/v1/*; /health and /metrics stay open) or all")
      ->check(CLI::IsMember({"v1", "all"}))
      ->capture_default_str();
  sub->add_option("--ssl-certfile", flags->ssl_certfile,
                  "Serve HTTPS with this PEM certificate (chain); needs --ssl-keyfile");
  sub->add_option("--ssl-keyfile", flags->ssl_keyfile,
                  "The certificate's private key (PEM, unencrypted)");
}

void AddUpstreamFlags(CLI::App* sub, UpstreamFlags* flags) {
  sub->add_option("--upstream-api-key", flags->upstream_api_key,
                  "API key the proxy presents to P and D (or KVFERRY_UPSTREAM_API_KEY); the "
                  "client's key is never forwarded");
  sub->add_option("--ssl-ca-certs", flags->ssl_ca_certs,
                  "CA bundle (PEM) that https:// prefill/decode certificates must chain to "
                  "(default: the system's CAs)");
}

StatusOr<http::ApiKeyOptions> ApiKeyOptionsOf(const SecurityFlags& flags) {
  http::ApiKeyOptions out;
  KVF_ASSIGN_OR_RETURN(out.scope, http::ParseApiKeyScope(flags.api_key_scope));
  out.keys = flags.api_keys;
  if (const char* env = std::getenv(kApiKeyEnv)) {
    for (std::string& k : SplitKeyList(env)) out.keys.push_back(std::move(k));
  }
  return out;
}

http::TlsServerFiles TlsFilesOf(const SecurityFlags& flags) {
  return {flags.ssl_certfile, flags.ssl_keyfile};
}

int64_t RequestReadTimeoutMsOf(const SecurityFlags& flags) {
  return static_cast<int64_t>(flags.request_read_timeout_s * 1000.0);
}

proxy::UpstreamAccess UpstreamAccessOf(const UpstreamFlags& flags) {
  proxy::UpstreamAccess out;
  out.api_key = flags.upstream_api_key;
  if (out.api_key.empty()) {
    if (const char* env = std::getenv(kUpstreamApiKeyEnv)) {
      std::vector<std::string> keys = SplitKeyList(env);
      if (!keys.empty()) out.api_key = keys.front();
    }
  }
  out.ca_file = flags.ssl_ca_certs;
  return out;
}

std::string DescribeSecurity(const http::ApiKeyOptions& keys, const http::TlsServerFiles& tls) {
  std::string out = keys.keys.empty()
                        ? std::string("no API key")
                        : "API keys: " + std::to_string(keys.keys.size()) + ", required on " +
                              (keys.scope == http::ApiKeyScope::kAll ? "every path" : "/v1/*");
  out += tls.enabled() ? "; TLS" : "; plain HTTP";
  return out;
}

}  // namespace kvferry::tools
