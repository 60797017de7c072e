#include "kvferry/kv/head_sharding.h"

#include <string>

namespace kvferry::kv {

StatusOr<HeadSharding> HeadSharding::Create(int32_t num_kv_heads, int32_t tp_size) {
  if (num_kv_heads < 1 || tp_size < 1) {
    return InvalidArgumentError("head sharding: " + std::to_string(num_kv_heads) +
                                " KV heads over " + std::to_string(tp_size) +
                                " ranks: both must be >= 1");
  }
  if (num_kv_heads % tp_size != 0 && tp_size % num_kv_heads != 0) {
    return InvalidArgumentError("head sharding: " + std::to_string(num_kv_heads) +
                                " KV heads cannot be split over " + std::to_string(tp_size) +
                                " tensor-parallel ranks (one must divide the other)");
  }
  return HeadSharding(num_kv_heads, tp_size);
}

int32_t HeadSharding::HeadsPerRank() const { return replicated() ? 1 : num_kv_heads_ / tp_size_; }

int32_t HeadSharding::NumCopies() const { return replicated() ? tp_size_ / num_kv_heads_ : 1; }

int32_t HeadSharding::FirstHead(int32_t rank) const {
  return replicated() ? rank / NumCopies() : rank * HeadsPerRank();
}

int32_t HeadSharding::SourceRank(int32_t head) const {
  return replicated() ? head * NumCopies() : head / HeadsPerRank();
}

namespace {

// The source rank destination rank `dst_rank` reads `head` from: with the head replicated on the
// source, the i-th destination rank holding it reads copy i mod (copies) — so the destination's
// copies spread over the source's, each read once — and a destination rank that alone holds the
// head reads the first copy.
int32_t SpreadSourceRank(const HeadSharding& src, const HeadSharding& dst, int32_t dst_rank,
                         int32_t head) {
  const int32_t first = src.SourceRank(head);
  if (!src.replicated()) return first;
  const int32_t reader = dst.replicated() ? dst_rank - dst.SourceRank(head) : 0;
  return first + reader % src.NumCopies();
}

}  // namespace

StatusOr<std::vector<HeadRead>> PlanHeadReads(const HeadSharding& src, const HeadSharding& dst,
                                              int32_t dst_rank) {
  if (src.num_kv_heads() != dst.num_kv_heads()) {
    return InvalidArgumentError("head reads: source has " + std::to_string(src.num_kv_heads()) +
                                " KV heads, destination " + std::to_string(dst.num_kv_heads()));
  }
  if (dst_rank < 0 || dst_rank >= dst.tp_size()) {
    return OutOfRangeError("head reads: rank " + std::to_string(dst_rank) + " outside [0, " +
                           std::to_string(dst.tp_size()) + ")");
  }
  std::vector<HeadRead> reads;
  const int32_t first = dst.FirstHead(dst_rank);
  for (int32_t i = 0; i < dst.HeadsPerRank(); ++i) {
    const int32_t head = first + i;
    const int32_t rank = SpreadSourceRank(src, dst, dst_rank, head);
    if (!reads.empty() && reads.back().src_rank == rank) {
      ++reads.back().num_heads;  // the next head of the same source: consecutive there too
      continue;
    }
    reads.push_back({rank, head - src.FirstHead(rank), i, 1});
  }
  return reads;
}

StatusOr<int32_t> CountReaders(const HeadSharding& src, const HeadSharding& dst, int32_t src_rank) {
  int32_t readers = 0;
  for (int32_t d = 0; d < dst.tp_size(); ++d) {
    KVF_ASSIGN_OR_RETURN(std::vector<HeadRead> reads, PlanHeadReads(src, dst, d));
    for (const HeadRead& r : reads) readers += r.src_rank == src_rank ? 1 : 0;
  }
  return readers;
}

}  // namespace kvferry::kv
