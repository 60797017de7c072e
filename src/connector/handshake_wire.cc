#include "connector/handshake_wire.h"

#include <fmt/format.h>

#include <msgpack.hpp>

namespace kvferry::connector::internal {
namespace {

constexpr std::string_view kMagic = "kvferry.hs";
// No field of a handshake is larger than this (the agent blob is a few KB; regions are 2 per
// layer): corrupted length prefixes cannot make the decoder allocate more.
constexpr size_t kMaxElems = 1 << 16;
constexpr size_t kMaxBytes = 1 << 24;

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}
void PackBin(Packer& pk, std::string_view s) {
  pk.pack_bin(static_cast<uint32_t>(s.size()));
  pk.pack_bin_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackEnvelopeHead(Packer& pk, uint32_t n, std::string_view kind) {
  pk.pack_array(n);
  PackStr(pk, kMagic);
  pk.pack(kHandshakeVersion);
  PackStr(pk, kind);
}

// The one place msgpack's exceptions become a Status.
StatusOr<msgpack::object_handle> Unpack(std::string_view bytes, std::string_view what) {
  try {
    size_t offset = 0;
    msgpack::unpack_limit limit(kMaxElems, kMaxElems, kMaxBytes, kMaxBytes, kMaxBytes, 8);
    msgpack::object_handle oh =
        msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, limit);
    if (offset != bytes.size()) {
      return InvalidArgumentError(
          fmt::format("{}: {} trailing bytes after the message", what, bytes.size() - offset));
    }
    return oh;
  } catch (const std::exception& e) {
    return InvalidArgumentError(fmt::format("{}: malformed msgpack ({})", what, e.what()));
  }
}

bool IsStr(const msgpack::object& o) { return o.type == msgpack::type::STR; }
std::string_view AsStr(const msgpack::object& o) { return {o.via.str.ptr, o.via.str.size}; }
bool IsUint(const msgpack::object& o) { return o.type == msgpack::type::POSITIVE_INTEGER; }

// Checks ["kvferry.hs", version, kind, ...] and returns the array.
StatusOr<const msgpack::object_array*> Envelope(const msgpack::object& o, std::string_view what) {
  if (o.type != msgpack::type::ARRAY || o.via.array.size < 3) {
    return InvalidArgumentError(fmt::format("{}: not a kvferry handshake message", what));
  }
  const msgpack::object_array& a = o.via.array;
  if (!IsStr(a.ptr[0]) || AsStr(a.ptr[0]) != kMagic) {
    return InvalidArgumentError(fmt::format("{}: bad magic", what));
  }
  if (!IsUint(a.ptr[1])) return InvalidArgumentError(fmt::format("{}: bad version", what));
  if (a.ptr[1].via.u64 != kHandshakeVersion) {
    return InvalidArgumentError(fmt::format("{}: version {} is not supported (this build: {})",
                                            what, a.ptr[1].via.u64, kHandshakeVersion));
  }
  if (!IsStr(a.ptr[2])) return InvalidArgumentError(fmt::format("{}: bad message kind", what));
  return &a;
}

// Field readers over the body map.
class BodyReader {
 public:
  explicit BodyReader(const msgpack::object_map& m) : m_(m) {}

  const msgpack::object* Find(std::string_view key) const {
    for (uint32_t i = 0; i < m_.size; ++i) {
      if (IsStr(m_.ptr[i].key) && AsStr(m_.ptr[i].key) == key) return &m_.ptr[i].val;
    }
    return nullptr;
  }
  Status Missing(std::string_view key, std::string_view type) const {
    return InvalidArgumentError(
        fmt::format("handshake body: field '{}' missing or not {}", key, type));
  }
  Status U64(std::string_view key, uint64_t* out) const {
    const msgpack::object* v = Find(key);
    if (v == nullptr || !IsUint(*v)) return Missing(key, "an unsigned integer");
    *out = v->via.u64;
    return Status::Ok();
  }
  Status I32(std::string_view key, int32_t lo, int32_t* out) const {
    uint64_t v = 0;
    KVF_RETURN_IF_ERROR(U64(key, &v));
    if (v < static_cast<uint64_t>(lo) || v > static_cast<uint64_t>(INT32_MAX)) {
      return InvalidArgumentError(
          fmt::format("handshake body: field '{}' = {} out of range", key, v));
    }
    *out = static_cast<int32_t>(v);
    return Status::Ok();
  }
  Status Str(std::string_view key, std::string* out) const {
    const msgpack::object* v = Find(key);
    if (v == nullptr || !IsStr(*v)) return Missing(key, "a string");
    *out = std::string(AsStr(*v));
    return Status::Ok();
  }
  Status Bin(std::string_view key, std::string* out) const {
    const msgpack::object* v = Find(key);
    if (v == nullptr || v->type != msgpack::type::BIN) return Missing(key, "bytes");
    *out = std::string(v->via.bin.ptr, v->via.bin.size);
    return Status::Ok();
  }
  Status Bool(std::string_view key, bool* out) const {
    const msgpack::object* v = Find(key);
    if (v == nullptr || v->type != msgpack::type::BOOLEAN) return Missing(key, "a boolean");
    *out = v->via.boolean;
    return Status::Ok();
  }

 private:
  const msgpack::object_map& m_;
};

StatusOr<WireRegion> ReadRegion(const msgpack::object& o, std::string_view field) {
  if (o.type != msgpack::type::ARRAY || o.via.array.size != 4) {
    return InvalidArgumentError(
        fmt::format("handshake body: {} entry is not [id, base, size, "
                    "bytes_per_kernel_block]",
                    field));
  }
  const msgpack::object* p = o.via.array.ptr;
  for (int i = 0; i < 4; ++i) {
    if (!IsUint(p[i])) {
      return InvalidArgumentError(
          fmt::format("handshake body: {} entry field {} is not an "
                      "unsigned integer",
                      field, i));
    }
  }
  if (p[0].via.u64 > UINT32_MAX) {
    return InvalidArgumentError(fmt::format("handshake body: {} id out of range", field));
  }
  return WireRegion{static_cast<uint32_t>(p[0].via.u64), p[1].via.u64, p[2].via.u64, p[3].via.u64};
}

void PackRegion(Packer& pk, const WireRegion& r) {
  pk.pack_array(4);
  pk.pack(r.id);
  pk.pack(r.base);
  pk.pack(r.size_bytes);
  pk.pack(r.bytes_per_kernel_block);
}

std::string EncodeBody(const HandshakeMetadata& m) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_map(18);
  auto key = [&](std::string_view k) { PackStr(pk, k); };
  key("engine_id"), PackStr(pk, m.engine_id);
  key("tp_rank"), pk.pack(m.tp_rank);
  key("tp_size"), pk.pack(m.tp_size);
  key("block_size_logical"), pk.pack(m.block_size_logical);
  key("block_size_kernel"), pk.pack(m.block_size_kernel);
  key("layout"), PackStr(pk, kv::LayoutName(m.layout));
  key("dtype"), PackStr(pk, kv::DTypeName(m.dtype));
  key("kind"), PackStr(pk, m.kind == kv::AttentionKind::kMLA ? "mla" : "standard");
  key("num_layers"), pk.pack(m.num_layers);
  key("num_kv_heads"), pk.pack(m.num_kv_heads);
  key("head_dim"), pk.pack(m.head_dim);
  key("num_blocks_kernel"), pk.pack(m.num_blocks_kernel);
  key("host_buffer"), pk.pack(m.host_buffer);
  key("regions");
  pk.pack_array(static_cast<uint32_t>(m.regions.size()));
  for (const WireRegion& r : m.regions) PackRegion(pk, r);
  key("generation_table"), PackRegion(pk, m.generation_table);
  key("agent_metadata"), PackBin(pk, m.agent_metadata);
  key("wire_version"), pk.pack(kHandshakeVersion);
  key("producer"), PackStr(pk, "kvferry");
  return std::string(buf.data(), buf.size());
}

StatusOr<HandshakeMetadata> DecodeBody(std::string_view bytes) {
  KVF_ASSIGN_OR_RETURN(msgpack::object_handle oh, Unpack(bytes, "handshake body"));
  const msgpack::object& o = oh.get();
  if (o.type != msgpack::type::MAP) return InvalidArgumentError("handshake body is not a map");
  BodyReader r(o.via.map);
  HandshakeMetadata m;
  KVF_RETURN_IF_ERROR(r.Str("engine_id", &m.engine_id));
  KVF_RETURN_IF_ERROR(r.I32("tp_rank", 0, &m.tp_rank));
  KVF_RETURN_IF_ERROR(r.I32("tp_size", 1, &m.tp_size));
  KVF_RETURN_IF_ERROR(r.I32("block_size_logical", 1, &m.block_size_logical));
  KVF_RETURN_IF_ERROR(r.I32("block_size_kernel", 1, &m.block_size_kernel));
  std::string s;
  KVF_RETURN_IF_ERROR(r.Str("layout", &s));
  KVF_ASSIGN_OR_RETURN(m.layout, kv::ParseLayout(s));
  KVF_RETURN_IF_ERROR(r.Str("dtype", &s));
  KVF_ASSIGN_OR_RETURN(m.dtype, kv::ParseDType(s));
  KVF_RETURN_IF_ERROR(r.Str("kind", &s));
  if (s == "standard") {
    m.kind = kv::AttentionKind::kStandard;
  } else if (s == "mla") {
    m.kind = kv::AttentionKind::kMLA;
  } else {
    return InvalidArgumentError(fmt::format("handshake body: unknown attention kind '{}'", s));
  }
  KVF_RETURN_IF_ERROR(r.I32("num_layers", 1, &m.num_layers));
  KVF_RETURN_IF_ERROR(r.I32("num_kv_heads", 1, &m.num_kv_heads));
  KVF_RETURN_IF_ERROR(r.I32("head_dim", 1, &m.head_dim));
  KVF_RETURN_IF_ERROR(r.I32("num_blocks_kernel", 1, &m.num_blocks_kernel));
  KVF_RETURN_IF_ERROR(r.Bool("host_buffer", &m.host_buffer));
  const msgpack::object* regions = r.Find("regions");
  if (regions == nullptr || regions->type != msgpack::type::ARRAY) {
    return r.Missing("regions", "an array");
  }
  for (uint32_t i = 0; i < regions->via.array.size; ++i) {
    KVF_ASSIGN_OR_RETURN(WireRegion reg, ReadRegion(regions->via.array.ptr[i], "regions"));
    m.regions.push_back(reg);
  }
  const msgpack::object* gen = r.Find("generation_table");
  if (gen == nullptr) return r.Missing("generation_table", "a region");
  KVF_ASSIGN_OR_RETURN(m.generation_table, ReadRegion(*gen, "generation_table"));
  KVF_RETURN_IF_ERROR(r.Bin("agent_metadata", &m.agent_metadata));

  // Cross-field consistency: what the planner will rely on.
  if (m.block_size_logical % m.block_size_kernel != 0) {
    return InvalidArgumentError(
        fmt::format("handshake body: block_size_kernel {} does not divide block_size_logical {}",
                    m.block_size_kernel, m.block_size_logical));
  }
  kv::CacheSpec spec = m.Spec();
  KVF_RETURN_IF_ERROR(spec.Validate().WithContext("handshake body"));
  if (static_cast<int32_t>(m.regions.size()) != spec.num_regions()) {
    return InvalidArgumentError(fmt::format("handshake body: {} regions for a cache of {}",
                                            m.regions.size(), spec.num_regions()));
  }
  for (const WireRegion& reg : m.regions) {
    if (reg.bytes_per_kernel_block != spec.bytes_per_kernel_block() ||
        reg.size_bytes < spec.region_bytes()) {
      return InvalidArgumentError(fmt::format(
          "handshake body: region {} ({} bytes, {} per kernel block) does not match the cache "
          "geometry ({} bytes, {} per kernel block)",
          reg.id, reg.size_bytes, reg.bytes_per_kernel_block, spec.region_bytes(),
          spec.bytes_per_kernel_block()));
    }
  }
  if (m.generation_table.size_bytes <
      static_cast<uint64_t>(m.num_blocks_logical()) * sizeof(uint64_t)) {
    return InvalidArgumentError("handshake body: generation table smaller than the block count");
  }
  return m;
}

// The bodies are consecutive ranks of one engine (all of them, or a split engine's share:
// vLLM's TP workers each serve their own); everything a D plans with is the same on every rank.
Status CheckRanksAgree(const std::vector<HandshakeMetadata>& ranks) {
  const HandshakeMetadata& f = ranks[0];
  const int32_t n = static_cast<int32_t>(ranks.size());
  if (f.tp_size < n || f.tp_size > kMaxTpRanks || f.tp_rank < 0 || f.tp_rank > f.tp_size - n) {
    return InvalidArgumentError(
        fmt::format("handshake reply: {} bodies from rank {} of {}", n, f.tp_rank, f.tp_size));
  }
  for (int32_t r = 0; r < n; ++r) {
    const HandshakeMetadata& m = ranks[r];
    if (m.tp_rank != f.tp_rank + r || m.tp_size != f.tp_size) {
      return InvalidArgumentError(
          fmt::format("handshake reply: body {} says rank {} of {}, expected rank {} of {}", r,
                      m.tp_rank, m.tp_size, f.tp_rank + r, f.tp_size));
    }
    const bool same = m.engine_id == f.engine_id && m.block_size_logical == f.block_size_logical &&
                      m.block_size_kernel == f.block_size_kernel && m.layout == f.layout &&
                      m.dtype == f.dtype && m.kind == f.kind && m.num_layers == f.num_layers &&
                      m.num_kv_heads == f.num_kv_heads && m.head_dim == f.head_dim &&
                      m.num_blocks_kernel == f.num_blocks_kernel && m.host_buffer == f.host_buffer;
    if (!same) {
      return InvalidArgumentError(
          fmt::format("handshake reply: rank {}'s cache geometry differs from rank 0's", r));
    }
  }
  return Status::Ok();
}

}  // namespace

kv::CacheSpec HandshakeMetadata::Spec() const {
  kv::CacheSpec s;
  s.num_layers = num_layers;
  s.num_kv_heads = num_kv_heads;
  s.head_dim = head_dim;
  s.dtype = dtype;
  s.kind = kind;
  s.layout = layout;
  s.block_size_kernel = block_size_kernel;
  s.num_blocks_kernel = num_blocks_kernel;
  return s;
}

int32_t HandshakeMetadata::num_blocks_logical() const {
  return num_blocks_kernel / (block_size_logical / block_size_kernel);
}

std::string CompatibilityHash(std::string_view model_name, const kv::CacheSpec& spec) {
  std::string canon =
      fmt::format("kvferry-compat/v{}|model={}|dtype={}|kind={}|layers={}|kv_heads={}|head_dim={}",
                  kHandshakeVersion, model_name, kv::DTypeName(spec.dtype),
                  spec.kind == kv::AttentionKind::kMLA ? "mla" : "standard", spec.num_layers,
                  spec.num_kv_heads, spec.head_dim);
  if (spec.kind == kv::AttentionKind::kMLA) {
    canon += fmt::format("|latent_dim={}|rope_dim={}", spec.head_dim - spec.mla_rope_dim,
                         spec.mla_rope_dim);
  }
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : canon) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x} {}", h, canon);
}

std::string EncodeHandshakeRequest(int32_t tp_rank, std::string_view auth_token) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  PackEnvelopeHead(pk, 5, "get_meta");
  pk.pack(tp_rank);
  PackStr(pk, auth_token);
  return std::string(buf.data(), buf.size());
}

StatusOr<HandshakeRequest> DecodeHandshakeRequest(std::string_view bytes) {
  KVF_ASSIGN_OR_RETURN(msgpack::object_handle oh, Unpack(bytes, "handshake request"));
  KVF_ASSIGN_OR_RETURN(const msgpack::object_array* a, Envelope(oh.get(), "handshake request"));
  if (AsStr(a->ptr[2]) != "get_meta" || a->size != 5 || !IsUint(a->ptr[3]) ||
      a->ptr[3].via.u64 > INT32_MAX || !IsStr(a->ptr[4])) {
    return InvalidArgumentError(
        "handshake request: expected [magic, version, \"get_meta\", "
        "tp_rank, auth_token]");
  }
  return HandshakeRequest{static_cast<int32_t>(a->ptr[3].via.u64), std::string(AsStr(a->ptr[4]))};
}

std::string EncodeReleaseRequest(std::string_view request_id, std::string_view auth_token) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  PackEnvelopeHead(pk, 5, "release");
  PackStr(pk, request_id);
  PackStr(pk, auth_token);
  return std::string(buf.data(), buf.size());
}

StatusOr<ReleaseRequest> DecodeReleaseRequest(std::string_view bytes) {
  KVF_ASSIGN_OR_RETURN(msgpack::object_handle oh, Unpack(bytes, "release request"));
  KVF_ASSIGN_OR_RETURN(const msgpack::object_array* a, Envelope(oh.get(), "release request"));
  if (AsStr(a->ptr[2]) != "release" || a->size != 5 || !IsStr(a->ptr[3]) || !IsStr(a->ptr[4])) {
    return InvalidArgumentError(
        "release request: expected [magic, version, \"release\", request_id, auth_token]");
  }
  return ReleaseRequest{std::string(AsStr(a->ptr[3])), std::string(AsStr(a->ptr[4]))};
}

std::string EncodeOk(const ServedRanks& served) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  PackEnvelopeHead(pk, 6, "ok");
  pk.pack(served.first_rank);
  pk.pack(served.num_ranks);
  pk.pack(served.tp_size);
  return std::string(buf.data(), buf.size());
}

StatusOr<ServedRanks> DecodeOkReply(std::string_view bytes) {
  KVF_ASSIGN_OR_RETURN(msgpack::object_handle oh, Unpack(bytes, "reply"));
  KVF_ASSIGN_OR_RETURN(const msgpack::object_array* a, Envelope(oh.get(), "reply"));
  std::string_view kind = AsStr(a->ptr[2]);
  if (kind == "error" && a->size == 4 && IsStr(a->ptr[3])) {
    return UnavailableError(fmt::format("peer refused: {}", AsStr(a->ptr[3])));
  }
  if (kind != "ok" || a->size != 6) {
    return InvalidArgumentError(
        "reply: expected [magic, version, \"ok\", first_rank, num_ranks, tp_size]");
  }
  ServedRanks served;
  const msgpack::object* v = a->ptr + 3;
  try {
    served = {v[0].as<int32_t>(), v[1].as<int32_t>(), v[2].as<int32_t>()};
  } catch (const msgpack::type_error&) {
    return InvalidArgumentError("reply: \"ok\" ranks are not integers");
  }
  if (served.tp_size < 1 || served.tp_size > kMaxTpRanks || served.num_ranks < 1 ||
      served.first_rank < 0 || served.first_rank > served.tp_size - served.num_ranks) {
    return InvalidArgumentError(fmt::format("reply: \"ok\" for ranks [{}, +{}) of {}",
                                            served.first_rank, served.num_ranks, served.tp_size));
  }
  return served;
}

std::string EncodeHandshakeReply(std::string_view compat_hash,
                                 std::span<const HandshakeMetadata> ranks) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  PackEnvelopeHead(pk, 5, "meta");
  PackStr(pk, compat_hash);
  pk.pack_array(static_cast<uint32_t>(ranks.size()));
  for (const HandshakeMetadata& m : ranks) PackBin(pk, EncodeBody(m));
  return std::string(buf.data(), buf.size());
}

std::string EncodeHandshakeError(std::string_view message) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  PackEnvelopeHead(pk, 4, "error");
  PackStr(pk, message);
  return std::string(buf.data(), buf.size());
}

StatusOr<std::vector<HandshakeMetadata>> DecodeHandshakeReply(
    std::string_view bytes, std::string_view expected_compat_hash) {
  KVF_ASSIGN_OR_RETURN(msgpack::object_handle oh, Unpack(bytes, "handshake reply"));
  KVF_ASSIGN_OR_RETURN(const msgpack::object_array* a, Envelope(oh.get(), "handshake reply"));
  std::string_view kind = AsStr(a->ptr[2]);
  if (kind == "error") {
    if (a->size != 4 || !IsStr(a->ptr[3])) {
      return InvalidArgumentError("handshake reply: malformed error message");
    }
    return UnavailableError(fmt::format("peer refused the handshake: {}", AsStr(a->ptr[3])));
  }
  if (kind != "meta" || a->size != 5 || !IsStr(a->ptr[3]) ||
      a->ptr[4].type != msgpack::type::ARRAY) {
    return InvalidArgumentError(
        "handshake reply: expected [magic, version, \"meta\", "
        "compat_hash, [body per rank]]");
  }
  std::string_view hash = AsStr(a->ptr[3]);
  if (hash != expected_compat_hash) {
    return FailedPreconditionError(fmt::format(
        "handshake: incompatible peer: its KV cache is [{}], ours is [{}] (model, "
        "KV dtype, attention kind, layers, KV heads and head dim (MLA: latent and rope dims) "
        "must be equal)",
        hash, expected_compat_hash));
  }
  const msgpack::object_array& bodies = a->ptr[4].via.array;
  if (bodies.size < 1 || bodies.size > static_cast<uint32_t>(kMaxTpRanks)) {
    return InvalidArgumentError(
        fmt::format("handshake reply: {} rank bodies (1 to {} allowed)", bodies.size, kMaxTpRanks));
  }
  std::vector<HandshakeMetadata> ranks;
  for (uint32_t i = 0; i < bodies.size; ++i) {
    const msgpack::object& b = bodies.ptr[i];
    if (b.type != msgpack::type::BIN) {
      return InvalidArgumentError(fmt::format("handshake reply: body {} is not bytes", i));
    }
    KVF_ASSIGN_OR_RETURN(HandshakeMetadata m,
                         DecodeBody(std::string_view(b.via.bin.ptr, b.via.bin.size)));
    ranks.push_back(std::move(m));
  }
  KVF_RETURN_IF_ERROR(CheckRanksAgree(ranks));
  return ranks;
}

std::string EncodePullNotification(std::string_view request_id, int32_t d_tp_size) {
  return fmt::format("{}:{}", request_id, d_tp_size);
}

StatusOr<PullNotification> DecodePullNotification(std::string_view message) {
  const size_t colon = message.rfind(':');
  const std::string_view tail =
      colon == std::string_view::npos ? std::string_view() : message.substr(colon + 1);
  int32_t tp = 0;
  for (char c : tail) {
    if (c < '0' || c > '9' || tp > kMaxTpRanks) {
      tp = 0;
      break;
    }
    tp = tp * 10 + (c - '0');
  }
  if (tp < 1 || tp > kMaxTpRanks) {
    return InvalidArgumentError(
        fmt::format("notification '{}' does not end in ':<tp_size>'", message));
  }
  return PullNotification{std::string(message.substr(0, colon)), tp};
}

}  // namespace kvferry::connector::internal
