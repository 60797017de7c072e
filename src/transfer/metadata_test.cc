#include "transfer/metadata.h"

#include <gtest/gtest.h>

namespace kvferry::transfer {
namespace {

AgentMetadata Sample() {
  AgentMetadata md;
  md.backend = "ucx";
  md.agent_name = "prefill-0";
  md.regions = {{1, 4096}, {7, 1ull << 40}};
  md.backend_blob = std::string("\0\1\2binary", 9);
  return md;
}

TEST(MetadataTest, RoundTrip) {
  std::string bytes = EncodeMetadata(Sample());
  auto md = DecodeMetadata(bytes);
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_EQ(md->backend, "ucx");
  EXPECT_EQ(md->agent_name, "prefill-0");
  ASSERT_EQ(md->regions.size(), 2u);
  EXPECT_EQ(md->regions[1].id, 7u);
  EXPECT_EQ(md->regions[1].length, 1ull << 40);
  EXPECT_EQ(md->backend_blob, Sample().backend_blob);
}

TEST(MetadataTest, EveryTruncationIsInvalidArgument) {
  std::string bytes = EncodeMetadata(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto md = DecodeMetadata(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(md.ok()) << n;
    EXPECT_EQ(md.status().code(), StatusCode::kInvalidArgument) << n;
  }
}

TEST(MetadataTest, EveryFlippedByteIsInvalidArgument) {
  std::string bytes = EncodeMetadata(Sample());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x5a;
    auto md = DecodeMetadata(bad);
    ASSERT_FALSE(md.ok()) << i;
    EXPECT_EQ(md.status().code(), StatusCode::kInvalidArgument) << i;
  }
}

TEST(MetadataTest, GarbageIsInvalidArgument) {
  EXPECT_EQ(DecodeMetadata("hello world, not metadata").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeMetadata("").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvferry::transfer
