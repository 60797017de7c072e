// The quantized block decoders against llama.cpp's own, as its `gguf` Python package writes them
// in NumPy (make_quant_expected.py): random blocks of every type the engine computes decode to
// the same f32 values, bit for bit. (The matmuls' integer dots are checked against these
// decoders in src/engine/kernels; the forward passes against llama.cpp in llama_cpp_test.cc.)
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/kernels/quant_types.h"
#include "kvferry/formats/dtype.h"

namespace kvferry {
namespace {

std::vector<std::byte> FromHex(const std::string& hex) {
  std::vector<std::byte> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<std::byte>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  }
  return out;
}

TEST(QuantRefsTest, DecodersEqualGgufPackage) {
  const char* path = std::getenv("KVF_QUANT_EXPECTED");
  ASSERT_NE(path, nullptr) << "KVF_QUANT_EXPECTED: the JSON make_quant_expected.py writes";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const nlohmann::json expected = nlohmann::json::parse(in);
  ASSERT_EQ(expected.size(), engine::kernels::ComputedQuantTypes().size());
  for (formats::DType dtype : engine::kernels::ComputedQuantTypes()) {
    const std::string name(formats::DTypeName(dtype));
    SCOPED_TRACE(name);
    ASSERT_TRUE(expected.contains(name));
    const std::vector<std::byte> blocks = FromHex(expected[name]["blocks"].get<std::string>());
    const auto& values = expected[name]["values"];
    const int64_t n = static_cast<int64_t>(blocks.size()) / formats::DTypeBlockBytes(dtype) *
                      formats::DTypeBlockElements(dtype);
    ASSERT_EQ(static_cast<int64_t>(values.size()), n);
    std::vector<float> got(static_cast<size_t>(n));
    engine::kernels::DequantizeRow(dtype, blocks.data(), n, got.data());
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &got[i], 4);
      const auto want =
          static_cast<uint32_t>(std::stoul(values[i].get<std::string>(), nullptr, 16));
      if (bits != want && differ++ < 5) {
        ADD_FAILURE() << "value " << i << ": 0x" << std::hex << bits << ", gguf 0x" << want;
      }
    }
    EXPECT_EQ(differ, 0);
  }
}

}  // namespace
}  // namespace kvferry
