#include "kvferry/formats/dtype.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "kvferry/common/half.h"
#include "kvferry/formats/tensor.h"

namespace kvferry::formats {
namespace {

std::vector<DType> AllDTypes() {
  std::vector<DType> all;
  for (int i = 0; i <= static_cast<int>(DType::kQ2_0); ++i) all.push_back(static_cast<DType>(i));
  return all;
}

TEST(DTypeTest, NamesAreUniqueAndMapBack) {
  std::set<std::string> names;
  for (DType d : AllDTypes()) {
    EXPECT_TRUE(names.insert(std::string(DTypeName(d))).second) << DTypeName(d);
    if (IsSafetensorsDType(d)) {
      EXPECT_EQ(DTypeFromSafetensorsName(DTypeName(d)), d);
    }
    if (auto id = GgmlTypeOf(d)) {
      EXPECT_EQ(DTypeFromGgmlType(*id), d) << DTypeName(d);
    }
  }
  EXPECT_EQ(DTypeFromSafetensorsName("f32"), std::nullopt);   // names are case-sensitive
  EXPECT_EQ(DTypeFromSafetensorsName("Q4_0"), std::nullopt);  // a GGUF type, not safetensors'
}

TEST(DTypeTest, GgmlIdsAndBlocksAreGgmls) {
  EXPECT_EQ(GgmlTypeOf(DType::kF32), 0u);
  EXPECT_EQ(GgmlTypeOf(DType::kF16), 1u);
  EXPECT_EQ(GgmlTypeOf(DType::kQ4_0), 2u);
  EXPECT_EQ(GgmlTypeOf(DType::kQ8_0), 8u);
  EXPECT_EQ(GgmlTypeOf(DType::kQ4_K), 12u);
  EXPECT_EQ(GgmlTypeOf(DType::kIQ2_XXS), 16u);
  EXPECT_EQ(GgmlTypeOf(DType::kBF16), 30u);
  EXPECT_EQ(GgmlTypeOf(DType::kMXFP4), 39u);
  EXPECT_EQ(GgmlTypeOf(DType::kU8), std::nullopt);
  for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 43u, 1000u}) {
    EXPECT_EQ(DTypeFromGgmlType(removed), std::nullopt) << removed;
  }
  EXPECT_EQ(DTypeBlockElements(DType::kQ4_0), 32u);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ4_0), 18u);
  EXPECT_EQ(DTypeBlockElements(DType::kQ4_K), 256u);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ4_K), 144u);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ6_K), 210u);
  EXPECT_EQ(DTypeBlockBytes(DType::kIQ4_XS), 136u);
}

TEST(DTypeTest, TensorBytes) {
  EXPECT_EQ(*TensorBytes(DType::kF32, std::vector<int64_t>{2, 3}), 24u);
  EXPECT_EQ(*TensorBytes(DType::kF32, std::vector<int64_t>{}), 4u);  // a scalar
  EXPECT_EQ(*TensorBytes(DType::kBF16, std::vector<int64_t>{0, 5}), 0u);
  EXPECT_EQ(*TensorBytes(DType::kQ4_0, std::vector<int64_t>{2, 64}), 2u * 2 * 18);
  EXPECT_EQ(*TensorBytes(DType::kF4, std::vector<int64_t>{4}), 2u);
  EXPECT_EQ(*TensorBytes(DType::kF6_E2M3, std::vector<int64_t>{8}), 6u);
  EXPECT_FALSE(TensorBytes(DType::kF4, std::vector<int64_t>{3}).ok());  // half a byte left
  EXPECT_FALSE(TensorBytes(DType::kQ4_0, std::vector<int64_t>{3}).ok());
  EXPECT_FALSE(TensorBytes(DType::kF32, std::vector<int64_t>{-1}).ok());
  const int64_t big = int64_t{1} << 62;
  EXPECT_FALSE(TensorBytes(DType::kU8, std::vector<int64_t>{big, 4}).ok());  // 2^64 elements
  EXPECT_FALSE(TensorBytes(DType::kF32, std::vector<int64_t>{big}).ok());    // 2^64 bytes
  EXPECT_TRUE(TensorBytes(DType::kU8, std::vector<int64_t>{big, 0, 4}).ok());
}

TensorView View(DType dtype, std::vector<int64_t> shape, const std::vector<std::byte>& bytes) {
  TensorView t;
  t.name = "w";
  t.file = "m.gguf";
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = bytes.data();
  t.size_bytes = bytes.size();
  return t;
}

TEST(TensorTest, RequireDTypeNamesTheType) {
  const std::vector<std::byte> bytes(144);
  const TensorView t = View(DType::kQ4_K, {256}, bytes);
  EXPECT_TRUE(RequireDType(t, {DType::kQ4_K}).ok());
  const Status s = RequireDType(t, {DType::kF32, DType::kF16, DType::kBF16});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tensor 'w' in 'm.gguf' has dtype Q4_K; expected F32, F16 or BF16");
}

TEST(TensorTest, ReadAsF32WidensFromUnalignedData) {
  const std::vector<float> values{1.0f, -2.5f, 0.15625f};
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    const size_t width = d == DType::kF32 ? 4 : 2;
    std::vector<std::byte> bytes(1 + values.size() * width);  // one byte off alignment
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t h = d == DType::kF16 ? F32ToF16(values[i]) : F32ToBF16(values[i]);
      const void* src = d == DType::kF32 ? static_cast<const void*>(&values[i]) : &h;
      std::memcpy(bytes.data() + 1 + i * width, src, width);
    }
    TensorView t = View(d, {3}, bytes);
    t.data = bytes.data() + 1;
    t.size_bytes = bytes.size() - 1;
    std::vector<float> out(3);
    ASSERT_TRUE(ReadAsF32(t, out).ok()) << DTypeName(d);
    EXPECT_EQ(out, values) << DTypeName(d);
    std::vector<float> wrong(2);
    EXPECT_EQ(ReadAsF32(t, wrong).code(), StatusCode::kInvalidArgument);
  }
}

TEST(TensorTest, ReadAsF32RefusesOtherTypes) {
  const std::vector<std::byte> bytes(4);
  std::vector<float> out(4);
  const Status s = ReadAsF32(View(DType::kI8, {4}, bytes), out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("has dtype I8"), std::string_view::npos) << s;
}

}  // namespace
}  // namespace kvferry::formats
