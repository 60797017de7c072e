#include "proxy/upstream_client.h"

#include <httplib.h>

namespace kvferry::proxy {

std::unique_ptr<httplib::Client> MakeUpstreamClient(const UpstreamUrl& url,
                                                    const UpstreamAccess& access) {
  // The scheme-host-port constructor makes an SSL client for https (httplib as Debian builds
  // it has OpenSSL support).
  auto client = std::make_unique<httplib::Client>(url.ToString());
  if (url.https) {
    if (!access.ca_file.empty()) client->set_ca_cert_path(access.ca_file);
    client->enable_server_certificate_verification(true);
  }
  if (!access.api_key.empty()) client->set_bearer_token_auth(access.api_key);
  return client;
}

namespace {

std::unique_ptr<httplib::Client> ClientWithin(const UpstreamUrl& u, const UpstreamAccess& access,
                                              int64_t timeout_ms) {
  std::unique_ptr<httplib::Client> c = MakeUpstreamClient(u, access);
  const auto timeout = std::chrono::milliseconds(timeout_ms);
  c->set_connection_timeout(timeout);
  c->set_read_timeout(timeout);
  c->set_write_timeout(timeout);
  return c;
}

}  // namespace

StatusOr<UpstreamAnswer> PostJson(const std::string& url, const UpstreamAccess& access,
                                  const std::string& path, const std::string& body,
                                  int64_t timeout_ms) {
  KVF_ASSIGN_OR_RETURN(const UpstreamUrl u, ParseUpstreamUrl(url));
  auto r = ClientWithin(u, access, timeout_ms)->Post(path, body, "application/json");
  if (!r) return UpstreamError(u.ToString() + path, static_cast<int>(r.error()));
  return UpstreamAnswer{r->status, std::move(r->body)};
}

StatusOr<std::string> FetchMetrics(const std::string& url, const UpstreamAccess& access,
                                   int64_t timeout_ms) {
  KVF_ASSIGN_OR_RETURN(const UpstreamUrl u, ParseUpstreamUrl(url));
  auto r = ClientWithin(u, access, timeout_ms)->Get("/metrics");
  if (!r) return UpstreamError(u.ToString() + "/metrics", static_cast<int>(r.error()));
  return r->status == 200 ? std::move(r->body) : std::string();
}

}  // namespace kvferry::proxy
