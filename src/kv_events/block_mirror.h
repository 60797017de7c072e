// BlockMirror: the blocks a stream of KV events says its publisher holds, rebuilt from the
// events alone (stored adds, removed takes away, cleared empties), and written back as one
// snapshot: [AllBlocksCleared, then a BlockStored per block, oldest first, each naming its
// parent]. The publisher keeps one to answer a replay its buffer no longer covers.
//
// A hash stored twice (two chains that collide, or a publisher that repeats itself) is counted
// and needs as many removals. Not thread-safe: the publisher's thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
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
    std::optional<std::string> medium;
    uint64_t order = 0;  // when it was first stored
    int32_t count = 0;
  };
  std::unordered_map<uint64_t, Block> blocks_;
  uint64_t next_order_ = 0;
};

}  // namespace kvferry::kv_events
