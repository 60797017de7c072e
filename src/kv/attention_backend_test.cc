#include "kvferry/kv/attention_backend.h"

#include <gtest/gtest.h>

namespace kvferry::kv {
namespace {

TEST(AttentionBackendTest, FlashSupportsExactSizes) {
  const AttentionBackend& flash = FlashAttentionBackend();
  EXPECT_EQ(flash.name, "flash");
  for (int32_t s : {16, 32, 64}) EXPECT_TRUE(flash.SupportsKernelBlockSize(s)) << s;
  for (int32_t s : {0, 8, 48, 128, -16}) EXPECT_FALSE(flash.SupportsKernelBlockSize(s)) << s;
  EXPECT_EQ(flash.DescribeSupportedSizes(), "16, 32, 64");
}

TEST(AttentionBackendTest, PagedSupportsMultiplesOf16) {
  const AttentionBackend& paged = PagedAttentionBackend();
  for (int32_t s : {16, 48, 128, 1024}) EXPECT_TRUE(paged.SupportsKernelBlockSize(s)) << s;
  for (int32_t s : {0, 8, 24, -16}) EXPECT_FALSE(paged.SupportsKernelBlockSize(s)) << s;
  EXPECT_EQ(paged.DescribeSupportedSizes(), "multiple of 16");
}

TEST(AttentionBackendTest, BlockSize128OnFlashGives64) {
  EXPECT_EQ(*SelectKernelBlockSize(128, FlashAttentionBackend()), 64);
  EXPECT_EQ(*SelectKernelBlockSize(256, FlashAttentionBackend()), 64);
  EXPECT_EQ(*SelectKernelBlockSize(96, FlashAttentionBackend()), 32);
  EXPECT_EQ(*SelectKernelBlockSize(48, FlashAttentionBackend()), 16);
  EXPECT_EQ(*SelectKernelBlockSize(32, FlashAttentionBackend()), 32);
}

TEST(AttentionBackendTest, PagedKeepsTheLogicalSize) {
  EXPECT_EQ(*SelectKernelBlockSize(128, PagedAttentionBackend()), 128);
  EXPECT_EQ(*SelectKernelBlockSize(48, PagedAttentionBackend()), 48);
}

TEST(AttentionBackendTest, UnsupportedSizeNamesBoth) {
  auto s = SelectKernelBlockSize(8, FlashAttentionBackend());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("8"), std::string_view::npos);
  EXPECT_NE(s.status().message().find("flash"), std::string_view::npos);
  EXPECT_EQ(SelectKernelBlockSize(24, PagedAttentionBackend()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectKernelBlockSize(0, PagedAttentionBackend()).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(AttentionBackendTest, LookupByName) {
  EXPECT_EQ(*FindAttentionBackend("flash"), &FlashAttentionBackend());
  EXPECT_EQ(*FindAttentionBackend("paged"), &PagedAttentionBackend());
  auto missing = FindAttentionBackend("xformers");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("xformers"), std::string_view::npos);
  EXPECT_NE(missing.status().message().find("flash, paged"), std::string_view::npos);
}

}  // namespace
}  // namespace kvferry::kv
