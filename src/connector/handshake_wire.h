// The side-channel handshake's wire format (docs/connector.md, "Handshake wire format").
//
// D asks P for its metadata; P answers with a versioned envelope whose compatibility hash is
// checked BEFORE the bodies are decoded, so a D never interprets the layout fields of an
// incompatible model. All messages are msgpack arrays:
//
//   request : ["kvferry.hs", version, "get_meta", tp_rank, auth_token]   (tp_rank: the asking
//             D rank, informational: every P rank's metadata comes back)
//             ["kvferry.hs", version, "release", request_id, auth_token]   (D: free my lease)
//   reply   : ["kvferry.hs", version, "meta", compat_hash, [body_0, ..., body_{n-1}]]
//             one body (msgpack bin) per P tensor-parallel rank this side channel serves, in
//             rank order: every rank, or a split engine's share (one process per rank, as
//             vLLM's workers; rank r's side channel is on rank 0's port + r)
//             ["kvferry.hs", version, "error", message]
//             ["kvferry.hs", version, "ok", first_rank, num_ranks, tp_size] (to "release":
//             the ranks whose lease it ended; a split engine's other ranks have their own)
//   body    : msgpack map, string keys (unknown keys ignored, missing required ones rejected):
//             engine_id, tp_rank, tp_size, block_size_logical, block_size_kernel, layout,
//             dtype, kind, num_layers, num_kv_heads, head_dim, num_blocks_kernel, host_buffer,
//             regions [[id, base, size, bytes_per_kernel_block]...],
//             generation_table [id, base, size], agent_metadata (bin)
//
// The bodies of one reply must agree on everything but tp_rank and the rank's own regions,
// generation table and agent metadata; they are consecutive ranks of the tp_size they name.
//
// A reply's major version must equal kHandshakeVersion (a reader rejects other versions with a
// message naming both; version 1 carried one body, version 2 every rank of the engine and a
// bare "ok"). Decoding never trusts sizes: truncated or
// corrupted bytes are InvalidArgument, never a crash or a huge allocation.
//
// Transfer notifications (the message a pull's last READ carries to a P rank) are
// "<P request id>:<D tp_size>", vLLM's format: a P rank releases its share of the lease once
// every D rank that reads from it has notified (kv::CountReaders).
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/kv/cache_spec.h"

namespace kvferry::connector::internal {

inline constexpr uint32_t kHandshakeVersion = 3;
// Most tensor-parallel ranks a reply may carry.
inline constexpr int32_t kMaxTpRanks = 64;

// One registered region P serves, in P's agent's id space.
struct WireRegion {
  uint32_t id = 0;  // transfer::RegionHandle::id on P
  uint64_t base = 0;
  uint64_t size_bytes = 0;
  uint64_t bytes_per_kernel_block = 0;  // 0 for the generation table
  friend bool operator==(const WireRegion&, const WireRegion&) = default;
};

struct HandshakeMetadata {
  std::string engine_id;
  int32_t tp_rank = 0;
  int32_t tp_size = 1;
  int32_t block_size_logical = 0;
  int32_t block_size_kernel = 0;
  kv::Layout layout = kv::Layout::kNHD;
  kv::DType dtype = kv::DType::kF32;
  kv::AttentionKind kind = kv::AttentionKind::kStandard;
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;  // in this rank's cache
  int32_t head_dim = 0;
  int32_t num_blocks_kernel = 0;
  bool host_buffer = false;         // regions are P's host buffer (same geometry as its cache)
  std::vector<WireRegion> regions;  // cache (or host buffer) regions, index = kv region index
  WireRegion generation_table;      // uint64 per P logical block, little endian
  std::string agent_metadata;       // transfer::Agent::GetLocalMetadata(), opaque

  // P's cache spec as D re-creates it (for planning and re-layout).
  kv::CacheSpec Spec() const;
  int32_t num_blocks_logical() const;

  friend bool operator==(const HandshakeMetadata&, const HandshakeMetadata&) = default;
};

// Hex of a 64-bit FNV-1a over the fields both sides must share (model, KV dtype, KV heads, head
// dim, layers, attention kind, for MLA the latent and rope dims of a row, handshake version),
// then those fields in clear text, so that a
// mismatch error says which one differs (e.g. P's f16 cache against D's f32 one: kvferry refuses
// rather than converting, docs/connector.md). Block sizes, layout and block counts are
// deliberately left out: they may differ and are handled by re-layout (as in vLLM).
// `spec.num_kv_heads` must be the MODEL's KV heads (instances at different TP sizes hold
// different numbers per rank).
std::string CompatibilityHash(std::string_view model_name, const kv::CacheSpec& spec);

std::string EncodeHandshakeRequest(int32_t tp_rank, std::string_view auth_token);
struct HandshakeRequest {
  int32_t tp_rank = 0;
  std::string auth_token;
};
StatusOr<HandshakeRequest> DecodeHandshakeRequest(std::string_view bytes);

// "release": D tells P over the side channel that it will not read a request's blocks (used when
// D drops a request before its pull, so P need not wait for the lease to run out).
std::string EncodeReleaseRequest(std::string_view request_id, std::string_view auth_token);
struct ReleaseRequest {
  std::string request_id;
  std::string auth_token;
};
StatusOr<ReleaseRequest> DecodeReleaseRequest(std::string_view bytes);
// The ranks a side channel's "ok" speaks for: [first_rank, first_rank + num_ranks) of tp_size.
struct ServedRanks {
  int32_t first_rank = 0;
  int32_t num_ranks = 1;
  int32_t tp_size = 1;
};
std::string EncodeOk(const ServedRanks& served);
// The ranks for "ok"; the peer's error (Unavailable) for "error"; InvalidArgument otherwise.
StatusOr<ServedRanks> DecodeOkReply(std::string_view bytes);

// `ranks`: every rank's metadata, in rank order.
std::string EncodeHandshakeReply(std::string_view compat_hash,
                                 std::span<const HandshakeMetadata> ranks);
std::string EncodeHandshakeError(std::string_view message);

// Decodes a reply: envelope first; an "error" reply becomes Unavailable carrying P's message;
// a compat hash other than `expected_compat_hash` is FailedPrecondition naming both hashes,
// returned before any body is looked at; otherwise every rank's body, in rank order.
// InvalidArgument on malformed bytes, a missing/ill-typed body field (named), or bodies that
// disagree (ranks out of order, tp_size not the body count, different geometry).
StatusOr<std::vector<HandshakeMetadata>> DecodeHandshakeReply(
    std::string_view bytes, std::string_view expected_compat_hash);

// The notification a D rank's pull carries to a P rank, and its parse (InvalidArgument when it
// does not end in ":<tp_size>").
std::string EncodePullNotification(std::string_view request_id, int32_t d_tp_size);
struct PullNotification {
  std::string request_id;
  int32_t d_tp_size = 1;
};
StatusOr<PullNotification> DecodePullNotification(std::string_view message);

}  // namespace kvferry::connector::internal
