// API keys of the HTTP front ends (`kvferry serve --api-key`, `kvferry proxy --api-key`;
// docs/deploy.md, "API keys"): a request must carry `Authorization: Bearer KEY` for one of the
// configured keys, else it is answered 401 with an OpenAI error body and never routed.
//
// Keys are compared in constant time: both the presented key and each configured key are hashed
// (SHA-256) and the digests compared with CRYPTO_memcmp against every key, without an early
// exit, so the time does not depend on how much of a key was right, nor on its length. Keys are
// never logged or echoed in an answer.
//
// Thread-safety: an ApiKeys is immutable after Create; Check may be called from any thread.
// RequireApiKeys is called once, before the server starts.
#pragma once

#include <httplib.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::http {

// Which paths need a key. kV1 (the default, as vLLM): /v1 and everything under it; /health and
// /metrics stay open to load balancers and Prometheus. kAll: every path.
enum class ApiKeyScope : uint8_t { kV1, kAll };

// "v1" | "all"; InvalidArgument otherwise.
StatusOr<ApiKeyScope> ParseApiKeyScope(std::string_view name);

struct ApiKeyOptions {
  std::vector<std::string> keys;  // empty: no key is required
  ApiKeyScope scope = ApiKeyScope::kV1;
};

class ApiKeys {
 public:
  // InvalidArgument for an empty key or one with whitespace or control characters (it could not
  // be sent as a bearer token). The message never contains a key.
  static StatusOr<ApiKeys> Create(const std::vector<std::string>& keys);

  bool empty() const { return digests_.empty(); }
  size_t size() const { return digests_.size(); }

  // OK when `authorization` (the header's value) is "Bearer KEY" for a configured key (the
  // scheme's case does not matter); Unauthenticated otherwise. Always OK when empty().
  Status Check(std::string_view authorization) const;

 private:
  using Digest = std::array<unsigned char, 32>;
  static Digest Hash(std::string_view key);
  std::vector<Digest> digests_;
};

// Whether a request for `path` needs a key under `scope`.
bool PathNeedsApiKey(std::string_view path, ApiKeyScope scope);

// Makes `http` check every request that needs a key before routing it (httplib's pre-routing
// handler); a refused request is answered 401, `WWW-Authenticate: Bearer`, with an OpenAI error
// body, and `on_refused(path)` is called (for metrics). Does nothing when options.keys is
// empty. InvalidArgument as ApiKeys::Create.
Status RequireApiKeys(httplib::Server& http, const ApiKeyOptions& options,
                      std::function<void(const std::string& path)> on_refused = {});

}  // namespace kvferry::http
