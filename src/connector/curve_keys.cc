#include "kvferry/connector/curve_keys.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kvferry/common/unique_handle.h"

namespace kvferry::connector {
namespace {

constexpr size_t kZ85KeyChars = 40;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

StatusOr<std::string> ReadWholeFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return InvalidArgumentError(
        fmt::format("{} {}: cannot be read ({})", what, path, std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Status WriteNewFile(const std::string& path, mode_t mode, const std::string& contents) {
  // O_EXCL: an existing key (perhaps the only copy of a secret) is never replaced.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    const std::string why = fmt::format("{}: {}", path, std::strerror(errno));
    return errno == EEXIST ? AlreadyExistsError(why + " (keys are never overwritten)")
                           : InvalidArgumentError(why);
  }
  ScopeExit close_fd([fd] { ::close(fd); });
  if (::fchmod(fd, mode) != 0 ||
      ::write(fd, contents.data(), contents.size()) != static_cast<ssize_t>(contents.size())) {
    return InternalError(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
  }
  return Status::Ok();
}

}  // namespace

bool CurveAvailable() { return zmq_has("curve") != 0; }

bool IsCurveKey(std::string_view key) {
  if (key.size() != kZ85KeyChars) return false;
  std::array<uint8_t, 32> raw{};
  const std::string text(key);
  return zmq_z85_decode(raw.data(), text.c_str()) != nullptr;
}

StatusOr<CurveKeyPair> GenerateCurveKeyPair() {
  if (!CurveAvailable()) {
    return UnimplementedError("this libzmq was built without CURVE (libsodium)");
  }
  char public_key[kZ85KeyChars + 1] = {};
  char secret_key[kZ85KeyChars + 1] = {};
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    return InternalError(fmt::format("zmq_curve_keypair failed: {}", zmq_strerror(zmq_errno())));
  }
  return CurveKeyPair{public_key, secret_key};
}

StatusOr<std::string> CurvePublicKeyOf(std::string_view secret_key) {
  if (!IsCurveKey(secret_key)) {
    return InvalidArgumentError("not a CURVE key (40 characters of Z85 text)");
  }
  if (!CurveAvailable()) {
    return UnimplementedError("this libzmq was built without CURVE (libsodium)");
  }
  char public_key[kZ85KeyChars + 1] = {};
  const std::string secret(secret_key);
  if (zmq_curve_public(public_key, secret.c_str()) != 0) {
    return InvalidArgumentError("not a CURVE secret key");
  }
  return std::string(public_key);
}

StatusOr<CurveKeyPair> ReadCurveSecretKeyFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return InvalidArgumentError(
        fmt::format("CURVE secret key file {}: {}", path, std::strerror(errno)));
  }
  if ((st.st_mode & S_IRWXO) != 0) {
    return InvalidArgumentError(fmt::format(
        "CURVE secret key file {} is accessible to other users (mode {:o}); chmod o-rwx it", path,
        st.st_mode & 07777));
  }
  KVF_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path, "CURVE secret key file"));
  KVF_ASSIGN_OR_RETURN(std::vector<LabelledCurveKey> keys, ParseCurveKeyList(text, path));
  if (keys.size() != 1 || !keys[0].label.empty()) {
    return InvalidArgumentError(fmt::format(
        "CURVE secret key file {}: must hold exactly one key, alone on its line", path));
  }
  CurveKeyPair pair;
  pair.secret_key = std::move(keys[0].key);
  StatusOr<std::string> public_key = CurvePublicKeyOf(pair.secret_key);
  if (!public_key.ok()) return public_key.status().WithContext("CURVE secret key file " + path);
  pair.public_key = std::move(public_key).value();
  return pair;
}

StatusOr<std::vector<LabelledCurveKey>> ParseCurveKeyList(std::string_view text,
                                                          std::string_view source) {
  std::vector<LabelledCurveKey> keys;
  int line_no = 0;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = Trim(text.substr(0, eol));
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    ++line_no;
    // '#' is in Z85's alphabet but cannot start a key (it is digit 84, and a 5-character group
    // starting with a digit above 82 exceeds 32 bits), so a '#' line is always a comment.
    if (line.empty() || line.front() == '#') continue;
    LabelledCurveKey entry;
    const size_t space = line.find_first_of(" \t");
    if (space != std::string_view::npos) {
      entry.label = std::string(line.substr(0, space));
      line = Trim(line.substr(space));
    }
    if (!IsCurveKey(line)) {
      return InvalidArgumentError(fmt::format(
          "{}:{}: expected `KEY` or `LABEL KEY` with a 40-character Z85 key", source, line_no));
    }
    entry.key = std::string(line);
    keys.push_back(std::move(entry));
  }
  return keys;
}

StatusOr<std::vector<LabelledCurveKey>> ReadCurveKeyListFile(const std::string& path) {
  KVF_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path, "CURVE key list"));
  KVF_ASSIGN_OR_RETURN(std::vector<LabelledCurveKey> keys, ParseCurveKeyList(text, path));
  if (keys.empty()) return InvalidArgumentError(fmt::format("CURVE key list {}: no key", path));
  return keys;
}

Status WriteCurveKeyPair(const CurveKeyPair& pair, const std::string& secret_path,
                         const std::string& public_path) {
  if (!IsCurveKey(pair.public_key) || !IsCurveKey(pair.secret_key)) {
    return InvalidArgumentError("not a CURVE key pair");
  }
  for (const std::string* path : {&secret_path, &public_path}) {
    if (::access(path->c_str(), F_OK) == 0) {
      return AlreadyExistsError(*path + " exists (keys are never overwritten)");
    }
  }
  KVF_RETURN_IF_ERROR(WriteNewFile(secret_path, 0600, pair.secret_key + "\n"));
  return WriteNewFile(public_path, 0644, pair.public_key + "\n");
}

}  // namespace kvferry::connector
