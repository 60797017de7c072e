#include "kvferry/proxy/upstream.h"

#include <httplib.h>

#include <charconv>

namespace kvferry::proxy {

StatusOr<UpstreamUrl> ParseUpstreamUrl(std::string_view url) {
  std::string_view rest = url;
  UpstreamUrl out;
  if (rest.starts_with("https://")) {
    out.https = true;
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  }
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || rest.find('/') != std::string_view::npos) {
    return InvalidArgumentError("upstream URL must be http(s)://host:port, got '" +
                                std::string(url) + "'");
  }
  out.host = std::string(rest.substr(0, colon));
  const std::string_view port = rest.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), out.port);
  if (ec != std::errc() || ptr != port.data() + port.size() || out.port <= 0 || out.port > 65535) {
    return InvalidArgumentError("bad port in upstream URL '" + std::string(url) + "'");
  }
  return out;
}

Status UpstreamError(const std::string& who, int httplib_error) {
  const auto err = static_cast<httplib::Error>(httplib_error);
  const std::string what = who + ": " + httplib::to_string(err);
  switch (err) {
    case httplib::Error::ConnectionTimeout:
      return DeadlineExceededError(what + " (connect timeout)");
    case httplib::Error::Read:
      return DeadlineExceededError(what + " (no answer before the read timeout, or reset)");
    case httplib::Error::SSLServerVerification:
      return UnavailableError(what +
                              " (its certificate does not verify against --ssl-ca-certs, or does "
                              "not name the host)");
    case httplib::Error::SSLConnection:
      return UnavailableError(what + " (TLS handshake failed: is it serving TLS?)");
    default:
      return UnavailableError(what);
  }
}

}  // namespace kvferry::proxy
