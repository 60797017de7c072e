#include "proxy/upstream_auth.h"

#include "kvferry/common/logging.h"
#include "kvferry/http/http_error.h"

namespace kvferry::proxy {

std::string UpstreamKeyRefused(cluster::Cluster* cluster, const UpstreamUrl& url,
                               const std::string& who, int http_status, bool key_set) {
  const std::string message =
      who + " refused the proxy's own API key (HTTP " + std::to_string(http_status) +
      "): the proxy presents --upstream-api-key (or KVFERRY_UPSTREAM_API_KEY) to its instances, " +
      (key_set ? "and this one does not accept it" : "and none is set");
  // Logged once per upstream: a misconfigured proxy refuses every request, and the counter
  // says how often.
  if (cluster->CountUpstreamAuthFailure(url.host + ":" + std::to_string(url.port)) == 1) {
    KVF_LOG_ERROR(
        "{}; further refusals by it are counted in "
        "kvferry:proxy_upstream_auth_failures_total, not logged",
        message);
  }
  return http::OpenAiErrorBody(kUpstreamKeyRefusedStatus, message);
}

}  // namespace kvferry::proxy
