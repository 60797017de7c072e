#include "connector/side_channel_keys.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>

#include "kvferry/connector/curve_keys.h"

namespace kvferry::connector::internal {

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost") return true;
  const std::string h(host);
  in_addr v4{};
  if (::inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return ::inet_pton(AF_INET6, h.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

StatusOr<SideChannelKeys> SideChannelKeys::Load(const KvTransferConfig& config) {
  SideChannelKeys keys;
  keys.has_auth_token_ = !config.auth_token.empty();
  const bool serves = config.kv_role != KvRole::kConsumer;
  if (!config.use_curve()) {
    if (serves && keys.has_auth_token_ && !IsLoopbackHost(config.side_channel_host)) {
      return InvalidArgumentError(fmt::format(
          "kv-transfer-config: auth_token travels in plaintext and is a loopback convenience "
          "only; side_channel_host {} is not loopback: use CURVE (curve_secret_key_file, "
          "docs/deploy.md)",
          config.side_channel_host));
    }
    return keys;
  }
  if (!CurveAvailable()) {
    return UnimplementedError("kv-transfer-config: CURVE keys given, but this libzmq lacks CURVE");
  }
  keys.curve_ = true;
  KVF_ASSIGN_OR_RETURN(CurveKeyPair own, ReadCurveSecretKeyFile(config.curve_secret_key_file));
  keys.public_key_ = own.public_key;
  keys.secret_key_ = own.secret_key;
  if (serves) {
    CurveServerKeys server;
    server.secret_key = own.secret_key;
    KVF_ASSIGN_OR_RETURN(std::vector<LabelledCurveKey> clients,
                         ReadCurveKeyListFile(config.curve_client_keys_file));
    for (LabelledCurveKey& c : clients) server.client_keys.push_back(std::move(c.key));
    keys.server_ = std::move(server);
  }
  keys.server_keys_file_ = config.curve_server_keys_file;
  if (config.kv_role != KvRole::kProducer && !config.curve_server_keys_file.empty()) {
    KVF_ASSIGN_OR_RETURN(std::vector<LabelledCurveKey> peers,
                         ReadCurveKeyListFile(config.curve_server_keys_file));
    for (LabelledCurveKey& p : peers) {
      if (p.label.empty()) {
        keys.any_peer_key_ = std::move(p.key);
      } else {
        keys.peer_keys_[p.label] = std::move(p.key);
      }
    }
  }
  return keys;
}

StatusOr<std::optional<CurveClientKeys>> SideChannelKeys::ForPeer(const std::string& engine_id,
                                                                  const std::string& host) const {
  if (!curve_) {
    if (has_auth_token_ && !IsLoopbackHost(host)) {
      return FailedPreconditionError(fmt::format(
          "side channel {}: not sending auth_token in plaintext off loopback; use CURVE "
          "(docs/deploy.md)",
          host));
    }
    return std::optional<CurveClientKeys>();
  }
  auto it = peer_keys_.find(engine_id);
  if (it == peer_keys_.end() && !any_peer_key_) {
    return FailedPreconditionError(fmt::format(
        "side channel {}: no CURVE public key for P engine '{}' in curve_server_keys_file ({})",
        host, engine_id, server_keys_file_.empty() ? "not set" : server_keys_file_));
  }
  return std::optional<CurveClientKeys>(CurveClientKeys{
      public_key_, secret_key_, it != peer_keys_.end() ? it->second : *any_peer_key_});
}

}  // namespace kvferry::connector::internal
