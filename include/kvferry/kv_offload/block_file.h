// Block files: one KV block of the disk tier (docs/kv_offload.md, "Files"), self-describing and
// checksummed, so that whatever a crash, a full disk or a stray writer leaves behind is
// recognised as damaged and never read as KV.
//
//   offset  size  field
//        0     8  magic "KVFBLK\0\1"
//        8     4  format version (1)
//       12     4  block_size: tokens per block
//       16     4  num_tokens: tokens of the whole prefix up to and including this block
//       20     4  flags: bit 0 = has a parent (the block is not the first of its chain)
//       24     8  salt   (the chain hashes' salt: model identity and hash seed)
//       32     8  layout (the cache geometry the payload is laid out for, BlockFileLayout)
//       40     8  hash   (the block's chain hash)
//       48     8  parent (the previous block's chain hash; 0 without one)
//       56     8  payload_bytes
//       64   4*n  the prefix's token ids (n = num_tokens), int32
//        …     p  payload: the block's KV bytes
//        …     8  XXH3-64 of every byte before it
// Integers are little-endian (the build refuses other hosts). The whole prefix is kept, not only
// the block's own tokens: a reader compares it with the prompt's, so two prefixes whose 64-bit
// chain hashes collide can never exchange KV.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::kv_offload {

inline constexpr size_t kBlockFileHeadBytes = 64;
inline constexpr size_t kBlockFileChecksumBytes = 8;
// A prefix longer than this is refused (a damaged header cannot make a reader allocate more).
inline constexpr uint32_t kMaxBlockFileTokens = 1u << 24;

struct BlockFileHeader {
  int32_t block_size = 0;
  int32_t num_tokens = 0;
  uint64_t salt = 0;
  uint64_t layout = 0;
  uint64_t hash = 0;
  std::optional<uint64_t> parent;
  uint64_t payload_bytes = 0;
  friend bool operator==(const BlockFileHeader&, const BlockFileHeader&) = default;
};

// The file's first part: header and prefix tokens (header.num_tokens of them). The payload and
// the checksum follow it (BlockFileChecksum).
std::string EncodeBlockFileHead(const BlockFileHeader& header,
                                std::span<const int32_t> prefix_tokens);
// XXH3-64 of head then payload, as the 8 bytes that end the file.
std::string BlockFileChecksum(std::string_view head, std::span<const std::byte> payload);

// The header of a file's first bytes (at least kBlockFileHeadBytes): DataLoss when the magic,
// version or sizes are wrong. Checks nothing past the header.
StatusOr<BlockFileHeader> DecodeBlockFileHeader(std::span<const std::byte> head);
// Total file size its header implies.
uint64_t BlockFileSize(const BlockFileHeader& header);

struct BlockFileView {
  BlockFileHeader header;
  std::span<const std::byte> tokens;   // num_tokens int32 values, little-endian
  std::span<const std::byte> payload;  // payload_bytes
};
// A whole file, checked: header, length, checksum. DataLoss naming what is wrong.
StatusOr<BlockFileView> DecodeBlockFile(std::span<const std::byte> file);
// Whether a decoded file's prefix tokens are `tokens`.
bool SamePrefix(const BlockFileView& file, std::span<const int32_t> tokens);

}  // namespace kvferry::kv_offload
