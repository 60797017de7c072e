#include "kvferry/kv/dtype.h"

#include <cstring>

namespace kvferry::kv {

void StoreAs(DType dtype, std::span<const float> src, std::byte* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src.data(), src.size_bytes());
      return;
    case DType::kF16:
      for (size_t i = 0; i < src.size(); ++i) {
        const uint16_t h = F32ToF16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case DType::kBF16:
      for (size_t i = 0; i < src.size(); ++i) {
        const uint16_t h = F32ToBF16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
  }
}

void LoadFrom(DType dtype, const std::byte* src, std::span<float> dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst.data(), src, dst.size_bytes());
      return;
    case DType::kF16:
      for (size_t i = 0; i < dst.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = F16ToF32(h);
      }
      return;
    case DType::kBF16:
      for (size_t i = 0; i < dst.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = BF16ToF32(h);
      }
      return;
  }
}

}  // namespace kvferry::kv
