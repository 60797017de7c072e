#include "kvferry/kv_offload/block_file.h"

#include <xxhash.h>

#include <bit>
#include <cstring>

namespace kvferry::kv_offload {

static_assert(std::endian::native == std::endian::little,
              "block files are little-endian; this host is not");

namespace {

constexpr char kMagic[8] = {'K', 'V', 'F', 'B', 'L', 'K', '\0', '\1'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kHasParent = 1;

template <typename T>
void Put(std::string* out, size_t offset, T value) {
  std::memcpy(out->data() + offset, &value, sizeof(T));
}

template <typename T>
T Get(std::span<const std::byte> in, size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(T));
  return value;
}

}  // namespace

std::string EncodeBlockFileHead(const BlockFileHeader& header,
                                std::span<const int32_t> prefix_tokens) {
  std::string out(kBlockFileHeadBytes + prefix_tokens.size_bytes(), '\0');
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  Put<uint32_t>(&out, 8, kVersion);
  Put<int32_t>(&out, 12, header.block_size);
  Put<int32_t>(&out, 16, static_cast<int32_t>(prefix_tokens.size()));
  Put<uint32_t>(&out, 20, header.parent ? kHasParent : 0);
  Put<uint64_t>(&out, 24, header.salt);
  Put<uint64_t>(&out, 32, header.layout);
  Put<uint64_t>(&out, 40, header.hash);
  Put<uint64_t>(&out, 48, header.parent.value_or(0));
  Put<uint64_t>(&out, 56, header.payload_bytes);
  if (!prefix_tokens.empty()) {
    std::memcpy(out.data() + kBlockFileHeadBytes, prefix_tokens.data(), prefix_tokens.size_bytes());
  }
  return out;
}

std::string BlockFileChecksum(std::string_view head, std::span<const std::byte> payload) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, head.data(), head.size());
  XXH3_64bits_update(state, payload.data(), payload.size());
  const uint64_t sum = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  std::string out(kBlockFileChecksumBytes, '\0');
  Put<uint64_t>(&out, 0, sum);
  return out;
}

StatusOr<BlockFileHeader> DecodeBlockFileHeader(std::span<const std::byte> head) {
  if (head.size() < kBlockFileHeadBytes) return DataLossError("block file shorter than its header");
  if (std::memcmp(head.data(), kMagic, sizeof(kMagic)) != 0) {
    return DataLossError("not a kvferry block file (magic)");
  }
  if (Get<uint32_t>(head, 8) != kVersion) {
    return DataLossError("block file version " + std::to_string(Get<uint32_t>(head, 8)) +
                         " (this build reads " + std::to_string(kVersion) + ")");
  }
  BlockFileHeader h;
  h.block_size = Get<int32_t>(head, 12);
  h.num_tokens = Get<int32_t>(head, 16);
  const uint32_t flags = Get<uint32_t>(head, 20);
  h.salt = Get<uint64_t>(head, 24);
  h.layout = Get<uint64_t>(head, 32);
  h.hash = Get<uint64_t>(head, 40);
  if (flags & kHasParent) h.parent = Get<uint64_t>(head, 48);
  h.payload_bytes = Get<uint64_t>(head, 56);
  if (h.block_size <= 0 || h.num_tokens <= 0 || h.num_tokens % h.block_size != 0 ||
      static_cast<uint32_t>(h.num_tokens) > kMaxBlockFileTokens || (flags & ~kHasParent) != 0 ||
      (h.parent.has_value() != (h.num_tokens > h.block_size)) ||
      h.payload_bytes > (uint64_t{1} << 40)) {
    return DataLossError("block file header is inconsistent");
  }
  return h;
}

uint64_t BlockFileSize(const BlockFileHeader& header) {
  return kBlockFileHeadBytes + uint64_t{4} * static_cast<uint64_t>(header.num_tokens) +
         header.payload_bytes + kBlockFileChecksumBytes;
}

StatusOr<BlockFileView> DecodeBlockFile(std::span<const std::byte> file) {
  BlockFileView v;
  KVF_ASSIGN_OR_RETURN(v.header, DecodeBlockFileHeader(file));
  if (file.size() != BlockFileSize(v.header)) {
    return DataLossError("block file is " + std::to_string(file.size()) +
                         " bytes, its header says " + std::to_string(BlockFileSize(v.header)) +
                         " (truncated or torn)");
  }
  const size_t token_bytes = 4 * static_cast<size_t>(v.header.num_tokens);
  const size_t body = file.size() - kBlockFileChecksumBytes;
  XXH64_hash_t sum = XXH3_64bits(file.data(), body);
  if (std::memcmp(&sum, file.data() + body, sizeof(sum)) != 0) {
    return DataLossError("block file checksum mismatch (corrupt)");
  }
  v.tokens = file.subspan(kBlockFileHeadBytes, token_bytes);
  v.payload = file.subspan(kBlockFileHeadBytes + token_bytes, v.header.payload_bytes);
  return v;
}

bool SamePrefix(const BlockFileView& file, std::span<const int32_t> tokens) {
  if (tokens.empty()) return file.tokens.empty();
  return file.tokens.size() == tokens.size_bytes() &&
         std::memcmp(file.tokens.data(), tokens.data(), tokens.size_bytes()) == 0;
}

}  // namespace kvferry::kv_offload
