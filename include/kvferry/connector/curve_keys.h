// CURVE keys for the side channel (ZeroMQ CURVE: Curve25519 keys, docs/deploy.md "Side-channel
// keys"). A key is 32 bytes, written as 40 characters of Z85 text.
//
// Files:
//   secret key file   one line, the Z85 secret key (mode 0600); the public key is derived from it
//   public key file   one line, the Z85 public key (what `kvferry keygen` writes as NAME.pub)
//   key list          one key per line, optionally after a label: `KEY` or `LABEL KEY`; blank
//                     lines and lines starting with '#' are ignored (no key starts with '#') P's
//                     list of the Ds it accepts (labels are names for people), D's list of Ps' keys
//                     (the label is P's engine id; no label: any engine)
//
// Thread-safety: free functions over values and files; safe from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::connector {

struct CurveKeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

struct LabelledCurveKey {
  std::string label;  // empty when the line has none
  std::string key;    // Z85 public key
};

// Whether this libzmq was built with CURVE (libsodium); Debian's is.
bool CurveAvailable();

// A new random key pair. Unimplemented when !CurveAvailable().
StatusOr<CurveKeyPair> GenerateCurveKeyPair();

// The public key of a Z85 secret key. InvalidArgument for anything that is not one.
StatusOr<std::string> CurvePublicKeyOf(std::string_view secret_key);

// 40 characters that decode as Z85.
bool IsCurveKey(std::string_view key);

// The key pair of a secret key file. InvalidArgument (naming the file) when it is unreadable,
// holds no key or a malformed one, or can be read by others than its owner (mode & 077).
StatusOr<CurveKeyPair> ReadCurveSecretKeyFile(const std::string& path);

// Parses a key list (format above). InvalidArgument naming `source` and the line for a
// malformed line.
StatusOr<std::vector<LabelledCurveKey>> ParseCurveKeyList(std::string_view text,
                                                          std::string_view source);
// Same, from a file; a file with no key at all is InvalidArgument too.
StatusOr<std::vector<LabelledCurveKey>> ReadCurveKeyListFile(const std::string& path);

// Writes `pair` as `secret_path` (mode 0600) and `public_path` (mode 0644). AlreadyExists when
// either file exists: a key is never overwritten.
Status WriteCurveKeyPair(const CurveKeyPair& pair, const std::string& secret_path,
                         const std::string& public_path);

}  // namespace kvferry::connector
