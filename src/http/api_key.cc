#include "kvferry/http/api_key.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <strings.h>

#include "kvferry/http/http_error.h"

namespace kvferry::http {
namespace {

constexpr std::string_view kBearer = "Bearer ";

bool UsableAsBearerToken(std::string_view key) {
  if (key.empty()) return false;
  for (unsigned char c : key) {
    if (c <= 0x20 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

StatusOr<ApiKeyScope> ParseApiKeyScope(std::string_view name) {
  if (name == "v1") return ApiKeyScope::kV1;
  if (name == "all") return ApiKeyScope::kAll;
  return InvalidArgumentError("API key scope must be v1 or all, got '" + std::string(name) + "'");
}

StatusOr<ApiKeys> ApiKeys::Create(const std::vector<std::string>& keys) {
  ApiKeys out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!UsableAsBearerToken(keys[i])) {
      return InvalidArgumentError("API key #" + std::to_string(i + 1) +
                                  " is empty or holds whitespace or control characters");
    }
    out.digests_.push_back(Hash(keys[i]));
  }
  return out;
}

ApiKeys::Digest ApiKeys::Hash(std::string_view key) {
  Digest d{};
  unsigned int len = 0;
  // SHA-256 cannot fail on a memory buffer; a failure would leave d zero, which matches no key
  // digest a working hash produced.
  EVP_Digest(key.data(), key.size(), d.data(), &len, EVP_sha256(), nullptr);
  return d;
}

Status ApiKeys::Check(std::string_view authorization) const {
  if (digests_.empty()) return Status::Ok();
  if (authorization.size() <= kBearer.size() ||
      ::strncasecmp(authorization.data(), kBearer.data(), kBearer.size()) != 0) {
    return UnauthenticatedError("Missing API key: send the header 'Authorization: Bearer <key>'.");
  }
  const Digest presented = Hash(authorization.substr(kBearer.size()));
  int matches = 0;
  for (const Digest& d : digests_) {
    matches |= CRYPTO_memcmp(presented.data(), d.data(), d.size()) == 0 ? 1 : 0;
  }
  if (matches == 0) return UnauthenticatedError("Incorrect API key provided.");
  return Status::Ok();
}

bool PathNeedsApiKey(std::string_view path, ApiKeyScope scope) {
  if (scope == ApiKeyScope::kAll) return true;
  return path == "/v1" || path.starts_with("/v1/");
}

Status RequireApiKeys(httplib::Server& http, const ApiKeyOptions& options,
                      std::function<void(const std::string& path)> on_refused) {
  if (options.keys.empty()) return Status::Ok();
  KVF_ASSIGN_OR_RETURN(ApiKeys keys, ApiKeys::Create(options.keys));
  http.set_pre_routing_handler(
      [keys = std::move(keys), scope = options.scope, on_refused = std::move(on_refused)](
          const httplib::Request& req, httplib::Response& res) {
        if (!PathNeedsApiKey(req.path, scope)) return httplib::Server::HandlerResponse::Unhandled;
        const Status st = keys.Check(req.get_header_value("Authorization"));
        if (st.ok()) return httplib::Server::HandlerResponse::Unhandled;
        res.status = HttpStatusFor(st.code());
        res.set_header("WWW-Authenticate", "Bearer");
        res.set_content(OpenAiErrorBody(st), "application/json");
        if (on_refused) on_refused(req.path);
        return httplib::Server::HandlerResponse::Handled;
      });
  return Status::Ok();
}

}  // namespace kvferry::http
