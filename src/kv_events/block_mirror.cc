#include "kv_events/block_mirror.h"

#include <algorithm>

namespace kvferry::kv_events {

void BlockMirror::Apply(const Event& event) {
  if (const auto* stored = std::get_if<BlockStored>(&event)) {
    const size_t bs = static_cast<size_t>(stored->block_size);
    for (size_t i = 0; i < stored->block_hashes.size(); ++i) {
      Block& b = blocks_[{stored->medium.value_or(""), stored->block_hashes[i]}];
      if (b.count++ > 0) continue;
      b.parent = i == 0 ? stored->parent_block_hash : stored->block_hashes[i - 1];
      b.tokens.assign(stored->token_ids.begin() + i * bs, stored->token_ids.begin() + (i + 1) * bs);
      b.order = next_order_++;
    }
  } else if (const auto* removed = std::get_if<BlockRemoved>(&event)) {
    for (uint64_t h : removed->block_hashes) {
      auto it = blocks_.find({removed->medium.value_or(""), h});
      if (it != blocks_.end() && --it->second.count == 0) blocks_.erase(it);
    }
  } else {
    blocks_.clear();
  }
}

std::optional<std::string> BlockMirror::MediumOf(const Key& key) {
  if (key.first.empty()) return std::nullopt;
  return key.first;
}

std::vector<Event> BlockMirror::Snapshot() const {
  std::vector<std::pair<uint64_t, const Key*>> order;  // (order, key)
  order.reserve(blocks_.size());
  for (const auto& [key, b] : blocks_) order.emplace_back(b.order, &key);
  std::sort(order.begin(), order.end());
  std::vector<Event> out;
  out.reserve(order.size() + 1);
  out.emplace_back(AllBlocksCleared{});
  for (const auto& [unused, key] : order) {
    const Block& b = blocks_.at(*key);
    out.emplace_back(BlockStored{
        {key->second}, b.parent, b.tokens, static_cast<int32_t>(b.tokens.size()), MediumOf(*key)});
  }
  return out;
}

}  // namespace kvferry::kv_events
