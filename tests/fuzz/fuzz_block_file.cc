// libFuzzer target: the disk tier's block file decoder (src/kv_offload/block_file.cc), which
// reads whatever a crash, a full disk or another writer left in the offload directory.
//
// Properties checked on every input, besides "no crash, no sanitizer report":
//   - DecodeBlockFileHeader and DecodeBlockFile return a Status, never abort;
//   - a file that decodes re-encodes, from its header, tokens and payload, to the same bytes
//     (nothing in a file is ignored: any change of it is noticed).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "kvferry/kv_offload/block_file.h"

namespace {

using namespace kvferry::kv_offload;

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  (void)DecodeBlockFileHeader(bytes);
  auto file = DecodeBlockFile(bytes);
  if (!file.ok()) return 0;
  std::vector<int32_t> tokens(file->tokens.size() / 4);
  if (!tokens.empty()) std::memcpy(tokens.data(), file->tokens.data(), file->tokens.size());
  const std::string head = EncodeBlockFileHead(file->header, tokens);
  const std::string sum = BlockFileChecksum(head, file->payload);
  Check(head.size() + file->payload.size() + sum.size() == size);
  Check(std::memcmp(head.data(), data, head.size()) == 0);
  Check(std::memcmp(sum.data(), data + size - sum.size(), sum.size()) == 0);
  return 0;
}
