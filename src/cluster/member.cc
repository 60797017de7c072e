#include "kvferry/cluster/member.h"

#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace kvferry::cluster {

using nlohmann::json;

namespace {

constexpr int kVersion = 1;

// The field `key` of `j` as T; InvalidArgument naming it when missing or of another type.
template <typename T>
StatusOr<T> Field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return InvalidArgumentError(std::string("missing '") + key + "'");
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return InvalidArgumentError(std::string("'") + key + "' is not a string");
  } else {
    if (!it->is_number_integer()) {
      return InvalidArgumentError(std::string("'") + key + "' is not an integer");
    }
  }
  return it->get<T>();
}

// The optional KV-event fields: all three or none.
Status DecodeKvEvents(const json& j, MemberInfo* m) {
  if (!j.contains("kv_events")) return Status::Ok();
  KVF_ASSIGN_OR_RETURN(m->kv_events, Field<std::string>(j, "kv_events"));
  KVF_ASSIGN_OR_RETURN(m->kv_events_replay, Field<std::string>(j, "kv_events_replay"));
  KVF_ASSIGN_OR_RETURN(std::string salt, Field<std::string>(j, "prefix_hash_salt"));
  auto [ptr, ec] = std::from_chars(salt.data(), salt.data() + salt.size(), m->prefix_hash_salt, 16);
  if (salt.empty() || ec != std::errc() || ptr != salt.data() + salt.size()) {
    return InvalidArgumentError("'prefix_hash_salt' is not a hex integer");
  }
  if (!m->kv_events.starts_with("tcp://")) return InvalidArgumentError("'kv_events' is not tcp://");
  return Status::Ok();
}

}  // namespace

std::string_view MemberRoleName(MemberRole role) {
  switch (role) {
    case MemberRole::kPrefill:
      return "prefill";
    case MemberRole::kDecode:
      return "decode";
    case MemberRole::kBoth:
      return "both";
  }
  return "both";
}

StatusOr<MemberRole> MemberRoleFromName(std::string_view name) {
  if (name == "prefill") return MemberRole::kPrefill;
  if (name == "decode") return MemberRole::kDecode;
  if (name == "both") return MemberRole::kBoth;
  return InvalidArgumentError("unknown role '" + std::string(name) + "'");
}

StatusOr<MemberRole> MemberRoleFromKvRole(std::string_view kv_role) {
  if (kv_role == "kv_producer") return MemberRole::kPrefill;
  if (kv_role == "kv_consumer") return MemberRole::kDecode;
  if (kv_role == "kv_both") return MemberRole::kBoth;
  return InvalidArgumentError("unknown kv_role '" + std::string(kv_role) + "'");
}

Status ValidateHttpUrl(std::string_view url) {
  const std::string bad = "url must be http://host:port, got '" + std::string(url) + "'";
  std::string_view rest = url;
  if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("https://")) {
    rest.remove_prefix(8);
  } else {
    return InvalidArgumentError(bad);
  }
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return InvalidArgumentError(bad);
  const std::string_view host = rest.substr(0, colon);
  const std::string_view port = rest.substr(colon + 1);
  if (host.find_first_of("/ ") != std::string_view::npos) return InvalidArgumentError(bad);
  int p = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc() || ptr != port.data() + port.size() || p <= 0 || p > 65535) {
    return InvalidArgumentError(bad);
  }
  return Status::Ok();
}

std::string EncodeMember(const MemberInfo& m) {
  json j = {{"version", kVersion},
            {"role", MemberRoleName(m.role)},
            {"url", m.url},
            {"engine_id", m.engine_id},
            {"side_channel", m.side_channel},
            {"model", m.model},
            {"tp_size", m.tp_size},
            {"kv_blocks_total", m.kv_blocks_total},
            {"block_size", m.block_size}};
  if (!m.kv_role.empty()) j["kv_role"] = m.kv_role;
  if (!m.kv_events.empty()) {
    j["kv_events"] = m.kv_events;
    j["kv_events_replay"] = m.kv_events_replay;
    char salt[17];
    std::snprintf(salt, sizeof(salt), "%016llx",
                  static_cast<unsigned long long>(m.prefix_hash_salt));
    j["prefix_hash_salt"] = salt;
  }
  return j.dump();
}

StatusOr<MemberInfo> DecodeMember(std::string_view id, std::string_view text) {
  if (id.empty()) return InvalidArgumentError("empty member id");
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgumentError("value is not a JSON object");
  KVF_ASSIGN_OR_RETURN(int64_t version, Field<int64_t>(j, "version"));
  if (version != kVersion) {
    return InvalidArgumentError("version " + std::to_string(version) + " is not supported (" +
                                std::to_string(kVersion) + ")");
  }
  MemberInfo m;
  m.id = std::string(id);
  KVF_ASSIGN_OR_RETURN(std::string role, Field<std::string>(j, "role"));
  KVF_ASSIGN_OR_RETURN(m.role, MemberRoleFromName(role));
  KVF_ASSIGN_OR_RETURN(m.url, Field<std::string>(j, "url"));
  KVF_RETURN_IF_ERROR(ValidateHttpUrl(m.url));
  KVF_ASSIGN_OR_RETURN(m.engine_id, Field<std::string>(j, "engine_id"));
  KVF_ASSIGN_OR_RETURN(m.side_channel, Field<std::string>(j, "side_channel"));
  KVF_ASSIGN_OR_RETURN(m.model, Field<std::string>(j, "model"));
  KVF_ASSIGN_OR_RETURN(int64_t tp, Field<int64_t>(j, "tp_size"));
  KVF_ASSIGN_OR_RETURN(m.kv_blocks_total, Field<int64_t>(j, "kv_blocks_total"));
  KVF_ASSIGN_OR_RETURN(int64_t block, Field<int64_t>(j, "block_size"));
  if (tp < 1 || tp > 1024) return InvalidArgumentError("tp_size out of range");
  if (block < 0 || block > (1 << 20)) return InvalidArgumentError("block_size out of range");
  if (m.kv_blocks_total < 0) return InvalidArgumentError("kv_blocks_total is negative");
  m.tp_size = static_cast<int32_t>(tp);
  m.block_size = static_cast<int32_t>(block);
  KVF_RETURN_IF_ERROR(DecodeKvEvents(j, &m));
  if (j.contains("kv_role")) {
    KVF_ASSIGN_OR_RETURN(m.kv_role, Field<std::string>(j, "kv_role"));
    KVF_RETURN_IF_ERROR(MemberRoleFromKvRole(m.kv_role).status());
  }
  return m;
}

}  // namespace kvferry::cluster
