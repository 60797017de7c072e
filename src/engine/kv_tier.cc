#include "engine/kv_tier.h"

#include <cstring>
#include <string>

#include "kvferry/common/check.h"

namespace kvferry::engine {

namespace {

uint64_t MixLayoutKey(uint64_t h, uint64_t v) {
  // splitmix64 of the running value: a fixed function, stable across builds and runs.
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

KvTier::KvTier(std::unique_ptr<kv_offload::DiskTier> disk, std::vector<kv::KvCache*> caches,
               kv::BlockGeometry geometry)
    : disk_(std::move(disk)), caches_(std::move(caches)), geometry_(geometry) {
  ForEachPiece(kv::LogicalBlockId(0), [this](std::byte*, size_t n) { block_bytes_ += n; });
}

uint64_t KvTier::LayoutKey(const std::vector<kv::KvCache*>& caches,
                           const kv::BlockGeometry& geometry) {
  uint64_t h = MixLayoutKey(1, caches.size());
  h = MixLayoutKey(h, static_cast<uint64_t>(geometry.block_size_logical()));
  for (const kv::KvCache* c : caches) {
    const kv::CacheSpec& s = c->spec();
    for (int64_t v : {int64_t{s.num_layers}, int64_t{s.num_kv_heads}, int64_t{s.head_dim},
                      int64_t{s.mla_rope_dim}, int64_t(s.dtype), int64_t(s.kind), int64_t(s.layout),
                      int64_t{s.block_size_kernel}}) {
      h = MixLayoutKey(h, static_cast<uint64_t>(v));
    }
  }
  return h;
}

template <typename Fn>
void KvTier::ForEachPiece(kv::LogicalBlockId id, Fn&& fn) const {
  const kv::KernelBlockRange kernel = geometry_.KernelBlocksOf(id);
  for (const kv::KvCache* cache : caches_) {
    const kv::CacheSpec::ByteRange range =
        cache->spec().KernelBlockBytes(kernel.first(), kernel.size());
    for (int32_t r = 0; r < cache->spec().num_regions(); ++r) {
      fn(cache->region(r).base + range.offset, static_cast<size_t>(range.length));
    }
  }
}

void KvTier::Store(kv::BlockHash hash, std::optional<kv::BlockHash> parent,
                   std::span<const int32_t> prefix, kv::LogicalBlockId id) {
  std::vector<std::byte> payload(block_bytes_);
  size_t at = 0;
  ForEachPiece(id, [&](const std::byte* p, size_t n) {
    std::memcpy(payload.data() + at, p, n);
    at += n;
  });
  disk_->Put(hash, parent, prefix, std::move(payload));
}

bool KvTier::Load(kv::BlockHash hash, std::span<const int32_t> prefix, kv::LogicalBlockId id) {
  StatusOr<std::vector<std::byte>> payload = disk_->Get(hash, prefix);
  if (!payload.ok() || payload->size() != block_bytes_) return false;
  size_t at = 0;
  ForEachPiece(id, [&](std::byte* p, size_t n) {
    std::memcpy(p, payload->data() + at, n);
    at += n;
  });
  return true;
}

}  // namespace kvferry::engine
