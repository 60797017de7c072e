#include "kvferry/kv_offload/block_file.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvferry::kv_offload {
namespace {

struct File {
  BlockFileHeader header;
  std::vector<int32_t> tokens;
  std::vector<std::byte> payload;
  std::vector<std::byte> bytes;
};

File MakeFile() {
  File f;
  f.tokens = {1, 2, 3, 4, 5, 6};
  for (int i = 0; i < 40; ++i) f.payload.push_back(static_cast<std::byte>(i * 7));
  f.header = {3, 6, 0x1111, 0x2222, 0x3333, 0x4444, f.payload.size()};
  const std::string head = EncodeBlockFileHead(f.header, f.tokens);
  const std::string sum = BlockFileChecksum(head, f.payload);
  for (char c : head) f.bytes.push_back(static_cast<std::byte>(c));
  f.bytes.insert(f.bytes.end(), f.payload.begin(), f.payload.end());
  for (char c : sum) f.bytes.push_back(static_cast<std::byte>(c));
  return f;
}

TEST(BlockFileTest, RoundTrips) {
  const File f = MakeFile();
  EXPECT_EQ(f.bytes.size(), BlockFileSize(f.header));
  auto v = DecodeBlockFile(f.bytes);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->header, f.header);
  EXPECT_TRUE(SamePrefix(*v, f.tokens));
  EXPECT_FALSE(SamePrefix(*v, std::vector<int32_t>{1, 2, 3, 4, 5, 7}));
  EXPECT_FALSE(SamePrefix(*v, std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(std::vector<std::byte>(v->payload.begin(), v->payload.end()), f.payload);
}

TEST(BlockFileTest, EveryFlippedBitAndEveryTruncationIsDataLoss) {
  const File f = MakeFile();
  for (size_t i = 0; i < f.bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<std::byte> bad = f.bytes;
      bad[i] ^= static_cast<std::byte>(1 << bit);
      EXPECT_EQ(DecodeBlockFile(bad).status().code(), StatusCode::kDataLoss) << i << "/" << bit;
    }
  }
  for (size_t n = 0; n < f.bytes.size(); ++n) {
    const std::span<const std::byte> torn(f.bytes.data(), n);
    EXPECT_EQ(DecodeBlockFile(torn).status().code(), StatusCode::kDataLoss) << n;
  }
  std::vector<std::byte> longer = f.bytes;
  longer.push_back(std::byte{0});
  EXPECT_EQ(DecodeBlockFile(longer).status().code(), StatusCode::kDataLoss);
}

TEST(BlockFileTest, HeadersThatCannotBeRightAreRefused) {
  File f = MakeFile();
  f.header.parent.reset();  // six tokens of three-token blocks: the second block has a parent
  const std::string head = EncodeBlockFileHead(f.header, f.tokens);
  std::vector<std::byte> bytes;
  for (char c : head) bytes.push_back(static_cast<std::byte>(c));
  EXPECT_EQ(DecodeBlockFileHeader(bytes).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kvferry::kv_offload
