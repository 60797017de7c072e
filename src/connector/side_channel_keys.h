// SideChannelKeys: how this connector secures its side channel, loaded once from its config
// (docs/deploy.md, "Side-channel keys"):
//
//   - CURVE, when curve_secret_key_file is set: P serves with its key pair and admits only the
//     Ds in curve_client_keys_file; D talks to a P only with that P's public key from
//     curve_server_keys_file (by engine id, or a key listed without one), else not at all;
//   - otherwise plaintext, where auth_token is a loopback convenience only: P refuses to start
//     serving it on another address, and D refuses to send it to one.
//
// Thread-safety: immutable after Load; read from any thread.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "connector/side_channel.h"
#include "kvferry/common/status.h"
#include "kvferry/connector/kv_transfer_config.h"

namespace kvferry::connector::internal {

// 127.0.0.0/8, ::1 and "localhost": addresses whose traffic never leaves the host.
bool IsLoopbackHost(std::string_view host);

class SideChannelKeys {
 public:
  // Reads the key files. InvalidArgument naming the file or the setting when one is missing or
  // malformed, or when a serving instance would accept the plaintext auth_token off loopback;
  // Unimplemented when CURVE is asked for and libzmq lacks it.
  static StatusOr<SideChannelKeys> Load(const KvTransferConfig& config);

  bool curve() const { return curve_; }
  // P's CURVE material (nullopt: plaintext, or an instance that does not serve).
  const std::optional<CurveServerKeys>& server() const { return server_; }
  // D's CURVE material for talking to P `engine_id` at `host` (nullopt: plaintext).
  // FailedPrecondition when CURVE is on and no key is listed for that engine, or when the
  // plaintext auth_token would go to a host that is not loopback. Nothing is sent then.
  StatusOr<std::optional<CurveClientKeys>> ForPeer(const std::string& engine_id,
                                                   const std::string& host) const;

 private:
  bool curve_ = false;
  bool has_auth_token_ = false;
  std::optional<CurveServerKeys> server_;
  std::string public_key_, secret_key_;           // D's own pair (CURVE)
  std::map<std::string, std::string> peer_keys_;  // engine id -> P's public key
  std::optional<std::string> any_peer_key_;       // a key listed without an engine id
  std::string server_keys_file_;
};

}  // namespace kvferry::connector::internal
