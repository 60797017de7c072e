#include "kvferry/cluster/registry_address.h"

#include <cctype>
#include <charconv>

namespace kvferry::cluster {

namespace {

constexpr std::string_view kScheme = "etcd://";
constexpr std::string_view kRoot = "/kvferry/";

StatusOr<EtcdEndpoint> ParseEndpoint(std::string_view hp, std::string_view url) {
  const size_t colon = hp.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return InvalidArgumentError("registry endpoint '" + std::string(hp) + "' in '" +
                                std::string(url) + "' is not HOST:PORT");
  }
  EtcdEndpoint ep;
  ep.host = std::string(hp.substr(0, colon));
  const std::string_view port = hp.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), ep.port);
  if (ec != std::errc() || ptr != port.data() + port.size() || ep.port <= 0 || ep.port > 65535) {
    return InvalidArgumentError("bad port in registry endpoint '" + std::string(hp) + "'");
  }
  return ep;
}

bool ValidNamespace(std::string_view ns) {
  if (ns.empty() || ns.size() > 128) return false;
  for (unsigned char c : ns) {
    if (!std::isalnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

}  // namespace

std::string RegistryAddress::ToString() const {
  std::string out(kScheme);
  for (size_t i = 0; i < endpoints.size(); ++i) {
    if (i > 0) out += ",";
    out += endpoints[i].ToString();
  }
  std::string_view ns = prefix;
  if (ns.starts_with(kRoot)) ns.remove_prefix(kRoot.size());
  if (ns.ends_with('/')) ns.remove_suffix(1);
  return out + "/" + std::string(ns);
}

StatusOr<RegistryAddress> ParseRegistryUrl(std::string_view url) {
  if (!url.starts_with(kScheme)) {
    return InvalidArgumentError(
        "registry must be etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE], got '" + std::string(url) +
        "'");
  }
  std::string_view rest = url.substr(kScheme.size());
  std::string_view ns = "default";
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    ns = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (ns.ends_with('/')) ns.remove_suffix(1);
  }
  if (!ValidNamespace(ns)) {
    return InvalidArgumentError("registry namespace '" + std::string(ns) +
                                "' must be 1-128 letters, digits, '-', '_' or '.'");
  }
  RegistryAddress out;
  if (rest.empty()) {
    return InvalidArgumentError("registry '" + std::string(url) + "' names no endpoint");
  }
  while (true) {
    const size_t comma = rest.find(',');
    KVF_ASSIGN_OR_RETURN(EtcdEndpoint ep, ParseEndpoint(rest.substr(0, comma), url));
    out.endpoints.push_back(std::move(ep));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  out.prefix = std::string(kRoot) + std::string(ns) + "/";
  return out;
}

}  // namespace kvferry::cluster
