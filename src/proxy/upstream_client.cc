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

}  // namespace kvferry::proxy
