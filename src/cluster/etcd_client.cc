#include "cluster/etcd_client.h"

#include <httplib.h>

#include <array>

#include "cluster/etcd_json.h"

namespace kvferry::cluster {

using nlohmann::json;

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

StatusOr<json> ParseObject(const std::string& body, std::string_view what) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InternalError(std::string(what) + ": etcd answered no JSON object");
  return j;
}

}  // namespace

int64_t Int64Of(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (!it->is_string()) return 0;
  try {
    return std::stoll(it->get<std::string>());
  } catch (const std::exception&) {
    return 0;
  }
}

StatusOr<EtcdKv> KvOf(const json& kv) {
  if (!kv.is_object()) return InvalidArgumentError("etcd key-value is not an object");
  EtcdKv out;
  const auto text = [&](const char* k) {
    auto it = kv.find(k);
    return it != kv.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  KVF_ASSIGN_OR_RETURN(out.key, Base64Decode(text("key")));
  KVF_ASSIGN_OR_RETURN(out.value, Base64Decode(text("value")));
  out.mod_revision = Int64Of(kv, "mod_revision");
  out.lease = Int64Of(kv, "lease");
  return out;
}

Status EtcdError(const json& error, std::string_view what) {
  const std::string message = std::string(what) + ": etcd: " +
                              (error.contains("message") && error["message"].is_string()
                                   ? error["message"].get<std::string>()
                                   : error.dump());
  switch (error.is_object() ? Int64Of(error, "code") : 0) {
    case 3:
      return InvalidArgumentError(message);
    case 4:
      return DeadlineExceededError(message);
    case 5:
      return NotFoundError(message);
    case 6:
      return AlreadyExistsError(message);
    case 9:
      return FailedPreconditionError(message);
    case 14:
      return UnavailableError(message);
    default:
      return InternalError(message);
  }
}

std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key (etcd's convention for an all-0xff prefix)
}

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) |
                       (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int s : {18, 12, 6, 0}) out += kAlphabet[(v >> s) & 63];
  }
  const size_t left = bytes.size() - i;
  if (left > 0) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (left == 2) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += left == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

StatusOr<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return InvalidArgumentError("base64 length is not a multiple of 4");
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int pad = 0;  // '=' only ends the last group: "xx==" or "xxx="
    if (i + 4 == text.size() && text[i + 3] == '=') pad = text[i + 2] == '=' ? 2 : 1;
    std::array<int, 4> v{};
    for (int k = 0; k < 4 - pad; ++k) {
      v[k] = Base64Value(text[i + k]);
      if (v[k] < 0) return InvalidArgumentError("bad base64 character");
    }
    const uint32_t n = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += static_cast<char>((n >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(n & 0xff);
  }
  return out;
}

EtcdClient::EtcdClient(std::vector<EtcdEndpoint> endpoints, int64_t call_timeout_ms)
    : endpoints_(std::move(endpoints)), call_timeout_ms_(call_timeout_ms) {}

EtcdEndpoint EtcdClient::current() const { return endpoints_[current_.load() % endpoints_.size()]; }

StatusOr<std::string> EtcdClient::Call(const char* method, const std::string& path,
                                       const std::string& body) {
  const size_t start = current_.load();
  Status last = UnavailableError("etcd: no endpoint");
  for (size_t k = 0; k < endpoints_.size(); ++k) {
    const size_t i = (start + k) % endpoints_.size();
    const EtcdEndpoint& ep = endpoints_[i];
    httplib::Client c(ep.host, ep.port);
    const auto timeout = std::chrono::milliseconds(call_timeout_ms_);
    c.set_connection_timeout(timeout);
    c.set_read_timeout(timeout);
    c.set_write_timeout(timeout);
    auto res =
        std::string_view(method) == "GET" ? c.Get(path) : c.Post(path, body, "application/json");
    if (!res) {
      const bool timed_out =
          res.error() == httplib::Error::ConnectionTimeout || res.error() == httplib::Error::Read;
      const std::string what =
          "etcd " + ep.ToString() + path + ": " + httplib::to_string(res.error());
      last = timed_out ? DeadlineExceededError(what) : UnavailableError(what);
      continue;  // try the next endpoint
    }
    current_.store(i);
    if (res->status == 200) return std::move(res->body);
    const json err = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
    return EtcdError(
        err.is_object() ? err : json{{"message", res->body}},
        "etcd " + ep.ToString() + path + " (HTTP " + std::to_string(res->status) + ")");
  }
  return last;
}

StatusOr<int64_t> EtcdClient::GrantLease(int64_t ttl_s) {
  KVF_ASSIGN_OR_RETURN(std::string body,
                       Call("POST", "/v3/lease/grant", json{{"TTL", ttl_s}}.dump()));
  KVF_ASSIGN_OR_RETURN(json j, ParseObject(body, "lease grant"));
  if (j.contains("error") && j["error"].is_string() && !j["error"].get<std::string>().empty()) {
    return UnavailableError("etcd lease grant: " + j["error"].get<std::string>());
  }
  const int64_t id = Int64Of(j, "ID");
  if (id == 0) return InternalError("etcd lease grant answered no lease id: " + body);
  return id;
}

StatusOr<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  KVF_ASSIGN_OR_RETURN(std::string body, Call("POST", "/v3/lease/keepalive",
                                              json{{"ID", std::to_string(lease)}}.dump()));
  // A stream of one message: {"result": {"ID", "TTL"}}; no TTL means etcd has no such lease.
  const size_t nl = body.find('\n');
  KVF_ASSIGN_OR_RETURN(json j, ParseObject(body.substr(0, nl), "lease keepalive"));
  if (j.contains("error")) return EtcdError(j["error"], "lease keepalive");
  const int64_t ttl = j.contains("result") ? Int64Of(j["result"], "TTL") : 0;
  if (ttl <= 0) return NotFoundError("etcd lease " + std::to_string(lease) + " is gone");
  return ttl;
}

Status EtcdClient::RevokeLease(int64_t lease) {
  return Call("POST", "/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump()).status();
}

Status EtcdClient::Create(const std::string& key, const std::string& value, int64_t lease) {
  const std::string k = Base64Encode(key);
  const json txn = {
      {"compare",
       json::array(
           {{{"key", k}, {"result", "EQUAL"}, {"target", "CREATE"}, {"create_revision", "0"}}})},
      {"success",
       json::array(
           {{{"request_put",
              {{"key", k}, {"value", Base64Encode(value)}, {"lease", std::to_string(lease)}}}}})}};
  KVF_ASSIGN_OR_RETURN(std::string body, Call("POST", "/v3/kv/txn", txn.dump()));
  KVF_ASSIGN_OR_RETURN(json j, ParseObject(body, "txn"));
  if (!j.value("succeeded", false)) {
    return AlreadyExistsError("etcd key " + key + " exists (another lease holds it)");
  }
  return Status::Ok();
}

Status EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  json put = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return Call("POST", "/v3/kv/put", put.dump()).status();
}

Status EtcdClient::Delete(const std::string& key) {
  return Call("POST", "/v3/kv/deleterange", json{{"key", Base64Encode(key)}}.dump()).status();
}

StatusOr<EtcdRange> EtcdClient::RangePrefix(const std::string& prefix) {
  const json req = {{"key", Base64Encode(prefix)}, {"range_end", Base64Encode(PrefixEnd(prefix))}};
  KVF_ASSIGN_OR_RETURN(std::string body, Call("POST", "/v3/kv/range", req.dump()));
  KVF_ASSIGN_OR_RETURN(json j, ParseObject(body, "range"));
  EtcdRange out;
  if (j.contains("header")) out.revision = Int64Of(j["header"], "revision");
  if (j.contains("kvs") && j["kvs"].is_array()) {
    for (const json& kv : j["kvs"]) {
      KVF_ASSIGN_OR_RETURN(EtcdKv decoded, KvOf(kv));
      out.kvs.push_back(std::move(decoded));
    }
  }
  return out;
}

Status EtcdClient::Health() {
  KVF_ASSIGN_OR_RETURN(std::string body, Call("GET", "/health", ""));
  KVF_ASSIGN_OR_RETURN(json j, ParseObject(body, "health"));
  if (j.value("health", std::string()) != "true") {
    return UnavailableError("etcd reports itself unhealthy: " + body);
  }
  return Status::Ok();
}

}  // namespace kvferry::cluster
