// HeadSharding: which KV heads each tensor-parallel rank of an instance holds in its own KV
// cache, and which rank of another instance (another TP size) a rank reads each of its heads
// from (docs/connector.md, "Rank mapping").
//
// A model with H_kv KV heads on tp_size ranks:
//   H_kv >= tp_size (tp_size divides H_kv): rank r holds heads [r*H_kv/tp, (r+1)*H_kv/tp);
//   H_kv <  tp_size (H_kv divides tp_size): heads are replicated, as vLLM does: rank r holds the
//     one head r / (tp_size / H_kv), so tp_size / H_kv consecutive ranks hold the same head.
// A rank's cache stores its heads in order (local head i = global head FirstHead(r) + i).
//
// Reading across instances (PlanHeadReads): rank d of the reading instance needs its heads
// [FirstHead(d), +HeadsPerRank()); each comes from a source rank holding it: the first one
// (SourceRank) unless the head is replicated on the source, where the i-th destination rank
// holding the head reads copy i mod NumCopies() — the destination's copies spread over the
// source's (MLA's one latent: D rank d reads P rank d mod P's TP size). Consecutive heads held by
// one source rank are one read.
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::kv {

class HeadSharding {
 public:
  // InvalidArgument unless num_kv_heads >= 1, tp_size >= 1 and one divides the other.
  static StatusOr<HeadSharding> Create(int32_t num_kv_heads, int32_t tp_size);
  HeadSharding() = default;  // one rank holding one head; use Create

  int32_t num_kv_heads() const { return num_kv_heads_; }  // the model's
  int32_t tp_size() const { return tp_size_; }
  bool replicated() const { return tp_size_ > num_kv_heads_; }
  int32_t HeadsPerRank() const;            // KV heads in each rank's cache
  int32_t FirstHead(int32_t rank) const;   // global id of the rank's local head 0
  int32_t SourceRank(int32_t head) const;  // the lowest rank holding global head `head`
  int32_t NumCopies() const;               // ranks holding each head (1 unless replicated)

  friend bool operator==(const HeadSharding&, const HeadSharding&) = default;

 private:
  HeadSharding(int32_t num_kv_heads, int32_t tp_size)
      : num_kv_heads_(num_kv_heads), tp_size_(tp_size) {}
  int32_t num_kv_heads_ = 1;
  int32_t tp_size_ = 1;
};

// One read of a destination rank (each destination head is read exactly once): `num_heads`
// consecutive heads from source rank `src_rank`, its local heads [src_first_head, +num_heads), into
// the destination rank's local heads [dst_first_head, +num_heads).
struct HeadRead {
  int32_t src_rank = 0;
  int32_t src_first_head = 0;
  int32_t dst_first_head = 0;
  int32_t num_heads = 0;
  friend bool operator==(const HeadRead&, const HeadRead&) = default;
};

// The reads destination rank `dst_rank` makes, in head order (one per source rank it reads
// from). `src` and `dst` must shard the same number of heads (InvalidArgument otherwise);
// OutOfRange for a rank outside [0, dst.tp_size()).
StatusOr<std::vector<HeadRead>> PlanHeadReads(const HeadSharding& src, const HeadSharding& dst,
                                              int32_t dst_rank);

// How many destination ranks read from source rank `src_rank` (0 for a replica nobody reads).
StatusOr<int32_t> CountReaders(const HeadSharding& src, const HeadSharding& dst, int32_t src_rank);

}  // namespace kvferry::kv
