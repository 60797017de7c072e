// BlockMirror: the blocks a stream of KV events says its publisher holds, rebuilt from the
// events alone (stored adds, removed takes away, cleared empties), and written back as one
// snapshot: [AllBlocksCleared, then a BlockStored per block, oldest first, each naming its
// parent]. The publisher keeps one to answer a replay its buffer no longer covers.
//
// Blocks are kept per medium ("CPU", "STORAGE", none): a block in RAM and on disk is two entries,
// and removing it from one medium leaves the other. A hash stored twice in one medium (two
// chains that collide, or a publisher that repeats itself) is counted and needs as many removals.
// Not thread-safe: the publisher's thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvferry/kv_events/event_wire.h"

namespace kvferry::kv_events {

class BlockMirror {
 public:
  void Apply(const Event& event);
  std::vector<Event> Snapshot() const;
  int64_t size() const { return static_cast<int64_t>(blocks_.size()); }

 private:
  struct Block {
    std::optional<uint64_t> parent;
    std::vector<int32_t> tokens;
    uint64_t order = 0;  // when it was first stored
    int32_t count = 0;
  };
  // (medium, or "" for none; hash) -> block
  using Key = std::pair<std::string, uint64_t>;
  static std::optional<std::string> MediumOf(const Key& key);
  std::map<Key, Block> blocks_;
  uint64_t next_order_ = 0;
};

}  // namespace kvferry::kv_events
