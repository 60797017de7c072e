#include "kvferry/kv_events/prefix_index.h"

#include "kvferry/kv/block_pool.h"

namespace kvferry::kv_events {

void PrefixIndex::SetMember(const std::string& id, MemberKeys keys) {
  Member& m = members_[id];
  if (m.keys != keys) m.blocks.clear();
  m.keys = keys;
}

void PrefixIndex::RemoveMember(const std::string& id) { members_.erase(id); }

bool PrefixIndex::Verified(const BlockStored& e, uint64_t salt) {
  // The decoder has checked that the tokens fill exactly the blocks named.
  return kv::ChainHashes(salt, e.parent_block_hash.value_or(0), e.block_size, e.token_ids) ==
         e.block_hashes;
}

ApplyCounts PrefixIndex::Apply(const std::string& id, const EventBatch& batch) {
  ApplyCounts c;
  auto it = members_.find(id);
  if (it == members_.end()) {
    c.unknown_member = static_cast<int64_t>(batch.events.size());
    return c;
  }
  Member& m = it->second;
  for (const Event& event : batch.events) {
    if (const auto* s = std::get_if<BlockStored>(&event)) {
      if (s->block_size != m.keys.block_size) {
        ++c.refused_block_size;
      } else if (!Verified(*s, m.keys.salt)) {
        ++c.refused_hash;
      } else {
        for (uint64_t h : s->block_hashes) {
          ++m.blocks[h];
          m.expected.erase(h);
        }
        c.stored_blocks += static_cast<int64_t>(s->block_hashes.size());
      }
    } else if (const auto* r = std::get_if<BlockRemoved>(&event)) {
      for (uint64_t h : r->block_hashes) {
        auto b = m.blocks.find(h);
        if (b == m.blocks.end()) {
          ++c.unknown_removals;
          continue;
        }
        if (--b->second == 0) m.blocks.erase(b);
        ++c.removed_blocks;
      }
    } else {
      m.blocks.clear();
      m.expected.clear();
      ++c.cleared;
    }
  }
  return c;
}

void PrefixIndex::Expect(const std::string& id, std::span<const int32_t> tokens, int64_t now_ms,
                         int64_t expect_ms) {
  auto it = members_.find(id);
  if (it == members_.end()) return;
  Member& m = it->second;
  std::erase_if(m.expected, [now_ms](const auto& e) { return e.second <= now_ms; });
  for (uint64_t h : kv::ChainHashes(m.keys.salt, 0, m.keys.block_size, tokens)) {
    if (m.blocks.count(h) == 0) m.expected[h] = now_ms + expect_ms;
  }
}

std::map<std::string, int64_t> PrefixIndex::MatchedTokens(std::span<const int32_t> tokens,
                                                          int64_t now_ms) const {
  std::map<std::string, int64_t> out;
  std::vector<std::pair<MemberKeys, std::vector<uint64_t>>> hashed;  // one chain per distinct keys
  for (const auto& [id, m] : members_) {
    const std::vector<uint64_t>* chain = nullptr;
    for (const auto& [keys, hashes] : hashed) {
      if (keys == m.keys) chain = &hashes;
    }
    if (chain == nullptr) {
      hashed.emplace_back(m.keys, kv::ChainHashes(m.keys.salt, 0, m.keys.block_size, tokens));
      chain = &hashed.back().second;
    }
    out[id] = HeldBlocks(m, *chain, now_ms) * m.keys.block_size;
  }
  return out;
}

int64_t PrefixIndex::HeldBlocks(const Member& m, const std::vector<uint64_t>& chain,
                                int64_t now_ms) {
  const auto holds = [&m, now_ms](uint64_t h) {
    if (m.blocks.count(h) != 0) return true;
    auto e = m.expected.find(h);
    return e != m.expected.end() && e->second > now_ms;
  };
  int64_t held = 0;
  while (held < static_cast<int64_t>(chain.size()) && holds(chain[held])) ++held;
  return held;
}

int64_t PrefixIndex::blocks(const std::string& id) const {
  auto it = members_.find(id);
  return it == members_.end() ? 0 : static_cast<int64_t>(it->second.blocks.size());
}

}  // namespace kvferry::kv_events
