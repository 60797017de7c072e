#include "kvferry/kv_events/event_wire.h"

#include <fmt/format.h>

#include <limits>
#include <msgpack.hpp>

namespace kvferry::kv_events {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;
using Object = msgpack::object;

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackOptionalStr(Packer& pk, const std::optional<std::string>& s) {
  if (s) {
    PackStr(pk, *s);
  } else {
    pk.pack_nil();
  }
}

void PackHashes(Packer& pk, const std::vector<uint64_t>& hashes) {
  pk.pack_array(static_cast<uint32_t>(hashes.size()));
  for (uint64_t h : hashes) pk.pack_uint64(h);
}

// Field order and presence as msgspec writes vLLM's structs: the tag first, every field without
// a default, none of the defaulted ones (they are all None here).
void PackEvent(Packer& pk, const BlockStored& e) {
  pk.pack_map(8);
  PackStr(pk, "type");
  PackStr(pk, "BlockStored");
  PackStr(pk, "block_hashes");
  PackHashes(pk, e.block_hashes);
  PackStr(pk, "parent_block_hash");
  if (e.parent_block_hash) {
    pk.pack_uint64(*e.parent_block_hash);
  } else {
    pk.pack_nil();
  }
  PackStr(pk, "token_ids");
  pk.pack_array(static_cast<uint32_t>(e.token_ids.size()));
  for (int32_t t : e.token_ids) pk.pack_int32(t);
  PackStr(pk, "block_size");
  pk.pack_int32(e.block_size);
  PackStr(pk, "lora_id");
  pk.pack_nil();
  PackStr(pk, "medium");
  PackOptionalStr(pk, e.medium);
  PackStr(pk, "lora_name");
  pk.pack_nil();
}

void PackEvent(Packer& pk, const BlockRemoved& e) {
  pk.pack_map(3);
  PackStr(pk, "type");
  PackStr(pk, "BlockRemoved");
  PackStr(pk, "block_hashes");
  PackHashes(pk, e.block_hashes);
  PackStr(pk, "medium");
  PackOptionalStr(pk, e.medium);
}

void PackEvent(Packer& pk, const AllBlocksCleared&) {
  pk.pack_map(1);
  PackStr(pk, "type");
  PackStr(pk, "AllBlocksCleared");
}

// ---- decoding ----

Status Bad(std::string_view what) {
  return InvalidArgumentError(fmt::format("kv event batch: {}", what));
}

bool IsStr(const Object& o) { return o.type == msgpack::type::STR; }
std::string_view AsStr(const Object& o) { return {o.via.str.ptr, o.via.str.size}; }

StatusOr<int64_t> AsInt(const Object& o, std::string_view field) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Bad(fmt::format("{} {} is out of range", field, o.via.u64));
    }
    return static_cast<int64_t>(o.via.u64);
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
  return Bad(fmt::format("{} is not an integer", field));
}

// An int hash as is; a bytes hash (vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) as the
// integer of its last 8 bytes, big-endian: the value vLLM itself would have sent.
StatusOr<uint64_t> AsHash(const Object& o, std::string_view field) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) return o.via.u64;
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return static_cast<uint64_t>(o.via.i64);
  if (o.type == msgpack::type::BIN && o.via.bin.size > 0) {
    uint64_t h = 0;
    const size_t n = o.via.bin.size;
    for (size_t i = n > 8 ? n - 8 : 0; i < n; ++i) {
      h = (h << 8) | static_cast<uint8_t>(o.via.bin.ptr[i]);
    }
    return h;
  }
  return Bad(fmt::format("{} is not a block hash (int or bytes)", field));
}

StatusOr<std::vector<uint64_t>> AsHashes(const Object& o) {
  if (o.type != msgpack::type::ARRAY) return Bad("block_hashes is not an array");
  std::vector<uint64_t> out;
  out.reserve(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    KVF_ASSIGN_OR_RETURN(uint64_t h, AsHash(o.via.array.ptr[i], "a block hash"));
    out.push_back(h);
  }
  return out;
}

StatusOr<std::optional<std::string>> AsOptionalStr(const Object& o, std::string_view field) {
  if (o.type == msgpack::type::NIL) return std::optional<std::string>();
  if (!IsStr(o)) return Bad(fmt::format("{} is not a string", field));
  return std::optional<std::string>(std::string(AsStr(o)));
}

// The fields of one event, by name, whether it came as a map or as vLLM's older arrays.
struct Fields {
  std::string_view type;
  std::vector<std::pair<std::string_view, const Object*>> named;
  const Object* Get(std::string_view name) const {
    for (const auto& [k, v] : named) {
      if (k == name) return v;
    }
    return nullptr;
  }
};

StatusOr<Fields> EventFields(const Object& o) {
  Fields f;
  if (o.type == msgpack::type::MAP) {
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const msgpack::object_kv& kv = o.via.map.ptr[i];
      if (!IsStr(kv.key)) return Bad("an event field name is not a string");
      if (AsStr(kv.key) == "type") {
        if (!IsStr(kv.val)) return Bad("an event's type is not a string");
        f.type = AsStr(kv.val);
      } else {
        f.named.emplace_back(AsStr(kv.key), &kv.val);
      }
    }
    return f;
  }
  if (o.type != msgpack::type::ARRAY || o.via.array.size == 0 || !IsStr(o.via.array.ptr[0])) {
    return Bad("an event is neither a map nor a tagged array");
  }
  static constexpr std::string_view kStored[] = {"block_hashes", "parent_block_hash", "token_ids",
                                                 "block_size",   "lora_id",           "medium"};
  static constexpr std::string_view kRemoved[] = {"block_hashes", "medium"};
  f.type = AsStr(o.via.array.ptr[0]);
  std::span<const std::string_view> names;
  if (f.type == "BlockStored") names = kStored;
  if (f.type == "BlockRemoved") names = kRemoved;
  for (uint32_t i = 1; i < o.via.array.size && i - 1 < names.size(); ++i) {
    f.named.emplace_back(names[i - 1], &o.via.array.ptr[i]);
  }
  return f;
}

StatusOr<const Object*> Required(const Fields& f, std::string_view name) {
  const Object* o = f.Get(name);
  if (o == nullptr) return Bad(fmt::format("{} lacks {}", f.type, name));
  return o;
}

StatusOr<BlockStored> DecodeStored(const Fields& f) {
  BlockStored e;
  KVF_ASSIGN_OR_RETURN(const Object* hashes, Required(f, "block_hashes"));
  KVF_ASSIGN_OR_RETURN(e.block_hashes, AsHashes(*hashes));
  KVF_ASSIGN_OR_RETURN(const Object* parent, Required(f, "parent_block_hash"));
  if (parent->type != msgpack::type::NIL) {
    KVF_ASSIGN_OR_RETURN(e.parent_block_hash, AsHash(*parent, "parent_block_hash"));
  }
  KVF_ASSIGN_OR_RETURN(const Object* size, Required(f, "block_size"));
  KVF_ASSIGN_OR_RETURN(int64_t block_size, AsInt(*size, "block_size"));
  if (block_size <= 0 || block_size > (1 << 20)) {
    return Bad(fmt::format("block_size {} is out of range", block_size));
  }
  e.block_size = static_cast<int32_t>(block_size);
  KVF_ASSIGN_OR_RETURN(const Object* tokens, Required(f, "token_ids"));
  if (tokens->type != msgpack::type::ARRAY) return Bad("token_ids is not an array");
  if (tokens->via.array.size != e.block_hashes.size() * static_cast<size_t>(block_size)) {
    return Bad(fmt::format("{} token ids do not fill {} blocks of {}", tokens->via.array.size,
                           e.block_hashes.size(), block_size));
  }
  e.token_ids.reserve(tokens->via.array.size);
  for (uint32_t i = 0; i < tokens->via.array.size; ++i) {
    KVF_ASSIGN_OR_RETURN(int64_t t, AsInt(tokens->via.array.ptr[i], "a token id"));
    if (t < 0 || t > std::numeric_limits<int32_t>::max()) {
      return Bad(fmt::format("token id {} is out of range", t));
    }
    e.token_ids.push_back(static_cast<int32_t>(t));
  }
  if (const Object* medium = f.Get("medium")) {
    KVF_ASSIGN_OR_RETURN(e.medium, AsOptionalStr(*medium, "medium"));
  }
  return e;
}

StatusOr<BlockRemoved> DecodeRemoved(const Fields& f) {
  BlockRemoved e;
  KVF_ASSIGN_OR_RETURN(const Object* hashes, Required(f, "block_hashes"));
  KVF_ASSIGN_OR_RETURN(e.block_hashes, AsHashes(*hashes));
  if (const Object* medium = f.Get("medium")) {
    KVF_ASSIGN_OR_RETURN(e.medium, AsOptionalStr(*medium, "medium"));
  }
  return e;
}

StatusOr<Event> DecodeEvent(const Object& o) {
  KVF_ASSIGN_OR_RETURN(Fields f, EventFields(o));
  if (f.type == "BlockStored") {
    KVF_ASSIGN_OR_RETURN(BlockStored e, DecodeStored(f));
    return Event(std::move(e));
  }
  if (f.type == "BlockRemoved") {
    KVF_ASSIGN_OR_RETURN(BlockRemoved e, DecodeRemoved(f));
    return Event(std::move(e));
  }
  if (f.type == "AllBlocksCleared") return Event(AllBlocksCleared{});
  return Bad(fmt::format("unknown event type '{}'", f.type));
}

// [ts, events, rank?] or {"ts": .., "events": [..], "data_parallel_rank": ..}.
StatusOr<EventBatch> DecodeBatchObject(const Object& o) {
  const Object* ts = nullptr;
  const Object* events = nullptr;
  const Object* rank = nullptr;
  if (o.type == msgpack::type::ARRAY && o.via.array.size >= 2) {
    ts = &o.via.array.ptr[0];
    events = &o.via.array.ptr[1];
    if (o.via.array.size >= 3) rank = &o.via.array.ptr[2];
  } else if (o.type == msgpack::type::MAP) {
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const msgpack::object_kv& kv = o.via.map.ptr[i];
      if (!IsStr(kv.key)) continue;
      if (AsStr(kv.key) == "ts") ts = &kv.val;
      if (AsStr(kv.key) == "events") events = &kv.val;
      if (AsStr(kv.key) == "data_parallel_rank") rank = &kv.val;
    }
  }
  if (ts == nullptr || events == nullptr) return Bad("not an event batch [ts, events, rank]");
  EventBatch batch;
  if (ts->type == msgpack::type::FLOAT64 || ts->type == msgpack::type::FLOAT32) {
    batch.ts = ts->via.f64;
  } else {
    KVF_ASSIGN_OR_RETURN(int64_t t, AsInt(*ts, "ts"));
    batch.ts = static_cast<double>(t);
  }
  if (events->type != msgpack::type::ARRAY) return Bad("events is not an array");
  for (uint32_t i = 0; i < events->via.array.size; ++i) {
    KVF_ASSIGN_OR_RETURN(Event e, DecodeEvent(events->via.array.ptr[i]));
    batch.events.push_back(std::move(e));
  }
  if (rank != nullptr && rank->type != msgpack::type::NIL) {
    KVF_ASSIGN_OR_RETURN(batch.data_parallel_rank, AsInt(*rank, "data_parallel_rank"));
  }
  return batch;
}

}  // namespace

Event ToWire(const kv::BlockEvent& event, int32_t block_size) {
  const std::string_view medium =
      event.tier == kv::BlockEvent::Tier::kDisk ? kMediumStorage : kMediumCpu;
  switch (event.kind) {
    case kv::BlockEvent::Kind::kStored:
      return BlockStored{event.block_hashes, event.parent_block_hash, event.token_ids, block_size,
                         std::string(medium)};
    case kv::BlockEvent::Kind::kRemoved:
      return BlockRemoved{event.block_hashes, std::string(medium)};
    case kv::BlockEvent::Kind::kAllCleared:
      break;
  }
  return AllBlocksCleared{};
}

std::string EncodeEventBatch(const EventBatch& batch) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(batch.data_parallel_rank ? 3 : 2);
  pk.pack_double(batch.ts);
  pk.pack_array(static_cast<uint32_t>(batch.events.size()));
  for (const Event& e : batch.events) {
    std::visit([&](const auto& v) { PackEvent(pk, v); }, e);
  }
  if (batch.data_parallel_rank) pk.pack_int64(*batch.data_parallel_rank);
  return std::string(buf.data(), buf.size());
}

StatusOr<EventBatch> DecodeEventBatch(std::string_view bytes) {
  msgpack::object_handle oh;
  try {
    size_t offset = 0;
    msgpack::unpack_limit limit(kMaxTokensPerEvent, kMaxEventsPerBatch, 1 << 16,
                                kMaxTokensPerEvent * 16, kMaxTokensPerEvent * 16, 8);
    oh = msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, limit);
    if (offset != bytes.size()) {
      return Bad(fmt::format("{} trailing bytes", bytes.size() - offset));
    }
  } catch (const std::exception& e) {
    return Bad(fmt::format("malformed msgpack ({})", e.what()));
  }
  return DecodeBatchObject(oh.get());
}

std::string EncodeSeq(int64_t seq) {
  std::string out(8, '\0');
  const uint64_t u = static_cast<uint64_t>(seq);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((u >> (56 - 8 * i)) & 0xff);
  return out;
}

StatusOr<int64_t> DecodeSeq(std::string_view frame) {
  if (frame.size() != 8) {
    return InvalidArgumentError(
        fmt::format("kv event sequence frame has {} bytes, not 8", frame.size()));
  }
  uint64_t u = 0;
  for (char c : frame) u = (u << 8) | static_cast<uint8_t>(c);
  return static_cast<int64_t>(u);
}

std::string_view EventName(const Event& event) {
  if (std::holds_alternative<BlockStored>(event)) return "BlockStored";
  if (std::holds_alternative<BlockRemoved>(event)) return "BlockRemoved";
  return "AllBlocksCleared";
}

}  // namespace kvferry::kv_events
