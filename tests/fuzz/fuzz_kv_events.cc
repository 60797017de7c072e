// libFuzzer target: the KV-event batch decoder (src/kv_events/event_wire.cc) and what consumes
// its output (the prefix index, the snapshot mirror).
//
// Properties checked on every input, besides "no crash, no sanitizer report":
//   - DecodeEventBatch never aborts and returns a Status;
//   - whatever decodes re-encodes, in vLLM's shape, to bytes that decode to the same batch;
//   - a decoded batch applies to a PrefixIndex and a BlockMirror without harm, and the mirror's
//     snapshot decodes again after its own round trip.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kv_events/block_mirror.h"
#include "kvferry/kv_events/event_wire.h"
#include "kvferry/kv_events/prefix_index.h"

namespace {

using namespace kvferry::kv_events;

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto batch = DecodeEventBatch(bytes);
  if (!batch.ok()) return 0;
  if (std::isnan(batch->ts)) batch->ts = 0;  // NaN equals nothing, itself included
  auto again = DecodeEventBatch(EncodeEventBatch(*batch));
  Check(again.ok() && *again == *batch);

  PrefixIndex index;
  index.SetMember("m", {16, 1});
  index.Apply("m", *batch);
  (void)index.MatchedTokens(std::vector<int32_t>(64, 1));
  BlockMirror mirror;
  for (const Event& e : batch->events) mirror.Apply(e);
  const EventBatch snapshot{0, mirror.Snapshot(), 0};
  auto snap = DecodeEventBatch(EncodeEventBatch(snapshot));
  Check(snap.ok() && *snap == snapshot);
  return 0;
}
