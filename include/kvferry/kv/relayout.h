// Re-layout: copy the KV of a token range of one sequence between two caches whose layout
// (NHD / HND) and/or kernel block size differ (docs/kv_layout.md, "Re-layout").
//
// A side of the copy is a KvSourceView / KvDestView: a CacheSpec, one base pointer per region
// (spec.num_regions() of them, each spec.region_bytes() long), and the sequence's kernel block
// table in that cache (token t lives in block_table[t / spec.block_size_kernel] at offset
// t % block_size_kernel). The views need not come from a KvCache: the connector describes a
// staging buffer holding a peer's kernel blocks the same way (num_blocks_kernel = the buffer's
// block count). Token t of the source goes to token t of the destination; only block-table
// entries that cover [token_begin, token_end) are read.
//
// dtype, attention kind, layers and head_dim must match (InvalidArgument otherwise); so must the
// heads, unless a HeadRange names which heads go where (a tensor-parallel rank's share: source
// heads [src_first, +count) to destination heads [dst_first, +count), each inside its spec).
// The copy never converts values, so it is bit-exact. Source and destination memory must not
// overlap.
//
// RelayoutTokens is the fast version (one memcpy per contiguous run: whole blocks when the
// geometry is equal, whole token slots in NHD -> NHD, per-head runs in HND -> HND);
// RelayoutTokensReference copies one (token, head) row at a time. They are bit-identical
// (tests compare them over every pair of geometries).
//
// Thread-safety: pure functions over caller-owned memory; concurrent calls must not write the
// same destination bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/kv/block_id.h"
#include "kvferry/kv/cache_spec.h"

namespace kvferry::kv {

struct KvSourceView {
  CacheSpec spec;
  std::vector<const std::byte*> regions;       // spec.num_regions() base pointers
  std::span<const KernelBlockId> block_table;  // the sequence's kernel blocks, in token order
};

struct KvDestView {
  CacheSpec spec;
  std::vector<std::byte*> regions;
  std::span<const KernelBlockId> block_table;
};

KvSourceView SourceViewOf(const KvCache& cache, std::span<const KernelBlockId> block_table);
KvDestView DestViewOf(KvCache& cache, std::span<const KernelBlockId> block_table);

// Which heads a re-layout copies. The default (count < 0): all of them, and both specs must have
// the same number of heads.
struct HeadRange {
  int32_t src_first = 0;
  int32_t dst_first = 0;
  int32_t count = -1;
};

// OK when the two specs describe the same model KV (dtype, kind, layers, head_dim, and heads:
// equal, or `heads` inside both), so that a re-layout between them is defined; InvalidArgument
// naming the first difference.
Status CheckRelayoutCompatible(const CacheSpec& src, const CacheSpec& dst, HeadRange heads = {});

// Copies tokens [token_begin, token_end) of every region (the heads `heads` names) from `src`
// to `dst`. Validates everything before copying (nothing is written on error): compatible
// specs, region pointer counts, 0 <= token_begin <= token_end, block tables long enough
// (OutOfRange), and every referenced kernel block inside its cache (OutOfRange).
Status RelayoutTokens(const KvSourceView& src, const KvDestView& dst, int64_t token_begin,
                      int64_t token_end, HeadRange heads = {});
Status RelayoutTokensReference(const KvSourceView& src, const KvDestView& dst, int64_t token_begin,
                               int64_t token_end, HeadRange heads = {});

}  // namespace kvferry::kv
