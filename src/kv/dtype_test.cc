#include "kvferry/kv/dtype.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvferry::kv {
namespace {

// The scalar conversions live in common/half.h (tested there); kv re-exports them under its
// own names, which the cache code and its callers use.
TEST(DTypeTest, ScalarConversionsAreReachableThroughKv) {
  EXPECT_EQ(kv::F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(kv::F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(kv::F32ToBF16(1.0f), 0x3f80);
  EXPECT_EQ(kv::BF16ToF32(0xc000), -2.0f);
}

TEST(DTypeTest, StoreAndLoadSpans) {
  const std::vector<float> values{1.0f, -0.5f, 3.140625f, 0.0f};
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<std::byte> buf(values.size() * DTypeBytes(d));
    StoreAs(d, values, buf.data());
    std::vector<float> back(values.size());
    LoadFrom(d, buf.data(), back);
    EXPECT_EQ(back, values) << DTypeName(d);  // all exactly representable
  }
}

}  // namespace
}  // namespace kvferry::kv
