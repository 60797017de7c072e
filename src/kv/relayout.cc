#include "kvferry/kv/relayout.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace kvferry::kv {
namespace {

Status CheckSide(const char* side, const CacheSpec& spec, size_t num_region_ptrs, bool any_null,
                 std::span<const KernelBlockId> table, int64_t token_begin, int64_t token_end) {
  KVF_RETURN_IF_ERROR(spec.Validate().WithContext(side));
  if (num_region_ptrs != static_cast<size_t>(spec.num_regions()) || any_null) {
    return InvalidArgumentError(std::string(side) + ": " + std::to_string(num_region_ptrs) +
                                " region pointers (null ones not allowed), spec has " +
                                std::to_string(spec.num_regions()) + " regions");
  }
  if (token_begin == token_end) return Status::Ok();
  const int64_t bs = spec.block_size_kernel;
  const int64_t first = token_begin / bs;
  const int64_t last = (token_end - 1) / bs;
  if (last >= static_cast<int64_t>(table.size())) {
    return OutOfRangeError(std::string(side) + ": token " + std::to_string(token_end - 1) +
                           " beyond block table of " + std::to_string(table.size()) +
                           " kernel blocks of " + std::to_string(bs));
  }
  for (int64_t i = first; i <= last; ++i) {
    const int32_t k = table[i].value();
    if (k < 0 || k >= spec.num_blocks_kernel) {
      return OutOfRangeError(std::string(side) + ": kernel block " + std::to_string(k) +
                             " outside cache of " + std::to_string(spec.num_blocks_kernel));
    }
  }
  return Status::Ok();
}

// The heads a copy moves, made explicit (count < 0: all of them).
HeadRange Resolve(const CacheSpec& src, HeadRange heads) {
  if (heads.count < 0) return {0, 0, src.num_kv_heads};
  return heads;
}

Status Validate(const KvSourceView& src, const KvDestView& dst, int64_t token_begin,
                int64_t token_end, HeadRange heads) {
  if (token_begin < 0 || token_end < token_begin) {
    return InvalidArgumentError("relayout: bad token range [" + std::to_string(token_begin) + ", " +
                                std::to_string(token_end) + ")");
  }
  KVF_RETURN_IF_ERROR(CheckRelayoutCompatible(src.spec, dst.spec, heads));
  const bool src_null =
      std::find(src.regions.begin(), src.regions.end(), nullptr) != src.regions.end();
  const bool dst_null =
      std::find(dst.regions.begin(), dst.regions.end(), nullptr) != dst.regions.end();
  KVF_RETURN_IF_ERROR(CheckSide("relayout source", src.spec, src.regions.size(), src_null,
                                src.block_table, token_begin, token_end));
  return CheckSide("relayout destination", dst.spec, dst.regions.size(), dst_null, dst.block_table,
                   token_begin, token_end);
}

// Copies the `n` elements of `es` bytes of one row to another, each row where its
// RowLocation puts it (one memcpy when both are contiguous).
void CopyRow(std::byte* dst_region, const CacheSpec::RowLocation& dr, const std::byte* src_region,
             const CacheSpec::RowLocation& sr, int32_t n, size_t es) {
  if (dr.contiguous() && sr.contiguous()) {
    std::memcpy(dst_region + dr.offset * es, src_region + sr.offset * es, n * es);
    return;
  }
  for (int32_t i = 0; i < n; ++i) {
    std::memcpy(dst_region + dr.ElementAt(i) * es, src_region + sr.ElementAt(i) * es, es);
  }
}

// A run of tokens that stays inside one kernel block on both sides.
struct Chunk {
  KernelBlockId sb;
  int32_t so;
  KernelBlockId db;
  int32_t doff, n;
};

std::vector<Chunk> ChunksOf(const KvSourceView& src, const KvDestView& dst, int64_t token_begin,
                            int64_t token_end) {
  const int64_t sbs = src.spec.block_size_kernel;
  const int64_t dbs = dst.spec.block_size_kernel;
  std::vector<Chunk> chunks;
  for (int64_t t = token_begin; t < token_end;) {
    const int64_t end = std::min({token_end, (t / sbs + 1) * sbs, (t / dbs + 1) * dbs});
    chunks.push_back(Chunk{src.block_table[t / sbs], static_cast<int32_t>(t % sbs),
                           dst.block_table[t / dbs], static_cast<int32_t>(t % dbs),
                           static_cast<int32_t>(end - t)});
    t = end;
  }
  return chunks;
}

// Every (layer, part, token, head) row of a chunk, found with CacheSpec::Row: any pair of
// layouts, vLLM's transposed (VLLM_CPU) and AMX-packed (VLLM_CPU_AMX) tiles included.
void CopyChunkRows(const KvSourceView& src, const KvDestView& dst, const Chunk& c, HeadRange h) {
  const CacheSpec& s = src.spec;
  const CacheSpec& d = dst.spec;
  const size_t es = DTypeBytes(s.dtype);
  for (int32_t layer = 0; layer < s.num_layers; ++layer) {
    for (int32_t p = 0; p < s.num_parts(); ++p) {
      const auto part = static_cast<CacheSpec::Part>(p);
      for (int32_t t = 0; t < c.n; ++t) {
        for (int32_t i = 0; i < h.count; ++i) {
          const auto sr = s.Row(layer, part, c.sb, c.so + t, h.src_first + i);
          const auto dr = d.Row(layer, part, c.db, c.doff + t, h.dst_first + i);
          CopyRow(dst.regions[dr.region], dr, src.regions[sr.region], sr, s.head_dim, es);
        }
      }
    }
  }
}

// The fast copy of one chunk of one region between NHD/HND caches: one memcpy per contiguous
// run (see relayout.h).
void CopyChunkNhdHnd(const CacheSpec& s, const CacheSpec& d, const std::byte* sbase,
                     std::byte* dbase, const Chunk& c, HeadRange h, bool all_heads) {
  const size_t es = DTypeBytes(s.dtype);
  const size_t row_bytes = static_cast<size_t>(s.head_dim) * es;
  const size_t s_slot = s.bytes_per_token_slot();
  const size_t d_slot = d.bytes_per_token_slot();
  if (s.layout == Layout::kNHD && d.layout == Layout::kNHD && all_heads) {
    std::memcpy(dbase + d.ElementOffset(c.db, c.doff, 0) * es,  // whole token slots
                sbase + s.ElementOffset(c.sb, c.so, 0) * es, c.n * s_slot);
  } else if (s.layout == Layout::kNHD && d.layout == Layout::kNHD) {  // a head run per token
    const std::byte* sp = sbase + s.ElementOffset(c.sb, c.so, h.src_first) * es;
    std::byte* dp = dbase + d.ElementOffset(c.db, c.doff, h.dst_first) * es;
    for (int32_t i = 0; i < c.n; ++i) {
      std::memcpy(dp + i * d_slot, sp + i * s_slot, h.count * row_bytes);
    }
  } else if (s.layout == Layout::kHND && d.layout == Layout::kHND) {  // per-head runs
    for (int32_t i = 0; i < h.count; ++i) {
      std::memcpy(dbase + d.ElementOffset(c.db, c.doff, h.dst_first + i) * es,
                  sbase + s.ElementOffset(c.sb, c.so, h.src_first + i) * es, c.n * row_bytes);
    }
  } else {  // transpose between NHD and HND: one row per (token, head)
    const size_t s_tok = (s.layout == Layout::kNHD ? s_slot : row_bytes);
    const size_t d_tok = (d.layout == Layout::kNHD ? d_slot : row_bytes);
    for (int32_t i = 0; i < h.count; ++i) {
      const std::byte* sp = sbase + s.ElementOffset(c.sb, c.so, h.src_first + i) * es;
      std::byte* dp = dbase + d.ElementOffset(c.db, c.doff, h.dst_first + i) * es;
      for (int32_t t = 0; t < c.n; ++t) {
        std::memcpy(dp + t * d_tok, sp + t * s_tok, row_bytes);
      }
    }
  }
}

}  // namespace

KvSourceView SourceViewOf(const KvCache& cache, std::span<const KernelBlockId> block_table) {
  KvSourceView v{cache.spec(), {}, block_table};
  for (int32_t r = 0; r < cache.num_regions(); ++r) v.regions.push_back(cache.region(r).base);
  return v;
}

KvDestView DestViewOf(KvCache& cache, std::span<const KernelBlockId> block_table) {
  KvDestView v{cache.spec(), {}, block_table};
  for (int32_t r = 0; r < cache.num_regions(); ++r) v.regions.push_back(cache.region(r).base);
  return v;
}

Status CheckRelayoutCompatible(const CacheSpec& src, const CacheSpec& dst, HeadRange heads) {
  auto mismatch = [](const char* field, const std::string& a, const std::string& b) {
    return InvalidArgumentError(std::string("relayout: ") + field + " differs (source " + a +
                                ", destination " + b + ")");
  };
  if (src.dtype != dst.dtype) {
    return mismatch("dtype", std::string(DTypeName(src.dtype)), std::string(DTypeName(dst.dtype)));
  }
  if (src.kind != dst.kind) {
    return mismatch("attention kind", std::to_string(static_cast<int>(src.kind)),
                    std::to_string(static_cast<int>(dst.kind)));
  }
  if (src.num_layers != dst.num_layers) {
    return mismatch("num_layers", std::to_string(src.num_layers), std::to_string(dst.num_layers));
  }
  if (heads.count < 0 && src.num_kv_heads != dst.num_kv_heads) {
    return mismatch("num_kv_heads", std::to_string(src.num_kv_heads),
                    std::to_string(dst.num_kv_heads));
  }
  if (heads.count >= 0 && (heads.count == 0 || heads.src_first < 0 || heads.dst_first < 0 ||
                           heads.src_first + heads.count > src.num_kv_heads ||
                           heads.dst_first + heads.count > dst.num_kv_heads)) {
    return InvalidArgumentError(
        "relayout: heads [" + std::to_string(heads.src_first) + ", +" +
        std::to_string(heads.count) + ") -> [" + std::to_string(heads.dst_first) + ", +" +
        std::to_string(heads.count) + ") outside the source's " + std::to_string(src.num_kv_heads) +
        " or the destination's " + std::to_string(dst.num_kv_heads) + " heads");
  }
  if (src.head_dim != dst.head_dim) {
    return mismatch("head_dim", std::to_string(src.head_dim), std::to_string(dst.head_dim));
  }
  return Status::Ok();
}

Status RelayoutTokensReference(const KvSourceView& src, const KvDestView& dst, int64_t token_begin,
                               int64_t token_end, HeadRange heads) {
  KVF_RETURN_IF_ERROR(Validate(src, dst, token_begin, token_end, heads));
  const HeadRange h = Resolve(src.spec, heads);
  const int64_t sbs = src.spec.block_size_kernel;
  const int64_t dbs = dst.spec.block_size_kernel;
  for (int64_t t = token_begin; t < token_end; ++t) {
    const Chunk one{src.block_table[t / sbs], static_cast<int32_t>(t % sbs),
                    dst.block_table[t / dbs], static_cast<int32_t>(t % dbs), 1};
    CopyChunkRows(src, dst, one, h);
  }
  return Status::Ok();
}

Status RelayoutTokens(const KvSourceView& src, const KvDestView& dst, int64_t token_begin,
                      int64_t token_end, HeadRange heads) {
  KVF_RETURN_IF_ERROR(Validate(src, dst, token_begin, token_end, heads));
  const CacheSpec& s = src.spec;
  const CacheSpec& d = dst.spec;
  const HeadRange h = Resolve(s, heads);
  // Every head of both sides: a token slot, and a whole block, have the same bytes on both.
  const bool all_heads = h.count == s.num_kv_heads && h.count == d.num_kv_heads;
  const bool same_geometry =
      all_heads && s.layout == d.layout && s.block_size_kernel == d.block_size_kernel;
  const bool vllm_cpu = IsVllmCpuPage(s.layout) || IsVllmCpuPage(d.layout);
  for (const Chunk& c : ChunksOf(src, dst, token_begin, token_end)) {
    if (same_geometry && c.n == s.block_size_kernel) {  // whole block, same byte order
      for (int32_t r = 0; r < s.num_regions(); ++r) {
        std::memcpy(dst.regions[r] + d.KernelBlockBytes(c.db).offset,
                    src.regions[r] + s.KernelBlockBytes(c.sb).offset, s.bytes_per_kernel_block());
      }
    } else if (vllm_cpu) {  // rows (vLLM's packed tiles on a VLLM_CPU* side)
      CopyChunkRows(src, dst, c, h);
    } else {
      for (int32_t r = 0; r < s.num_regions(); ++r) {
        CopyChunkNhdHnd(s, d, src.regions[r], dst.regions[r], c, h, all_heads);
      }
    }
  }
  return Status::Ok();
}

}  // namespace kvferry::kv
