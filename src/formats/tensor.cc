#include "kvferry/formats/tensor.h"

#include <algorithm>
#include <cstring>

#include "kvferry/common/half.h"

namespace kvferry::formats {

int64_t TensorView::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Status RequireDType(const TensorView& t, std::initializer_list<DType> allowed) {
  if (std::find(allowed.begin(), allowed.end(), t.dtype) != allowed.end()) return Status::Ok();
  std::string expected;
  size_t i = 0;
  for (DType d : allowed) {
    if (i > 0) expected += (i + 1 == allowed.size()) ? " or " : ", ";
    expected += DTypeName(d);
    ++i;
  }
  return InvalidArgumentError("tensor '" + t.name + "' in '" + t.file + "' has dtype " +
                              std::string(DTypeName(t.dtype)) + "; expected " + expected);
}

namespace {

// The data may sit at any byte offset of the file, so each value is copied out, not cast.
template <typename Bits, typename Convert>
void Widen(const std::byte* src, std::span<float> out, Convert convert) {
  for (size_t i = 0; i < out.size(); ++i) {
    Bits bits;
    std::memcpy(&bits, src + i * sizeof(Bits), sizeof(Bits));
    out[i] = convert(bits);
  }
}

}  // namespace

Status ReadAsF32(const TensorView& t, std::span<float> out) {
  KVF_RETURN_IF_ERROR(RequireDType(t, {DType::kF32, DType::kF16, DType::kBF16}));
  if (out.size() != static_cast<uint64_t>(t.elements())) {
    return InvalidArgumentError("tensor '" + t.name + "' in '" + t.file + "' has " +
                                std::to_string(t.elements()) + " elements, not " +
                                std::to_string(out.size()));
  }
  switch (t.dtype) {
    case DType::kF16:
      Widen<uint16_t>(t.data, out, F16ToF32);
      break;
    case DType::kBF16:
      Widen<uint16_t>(t.data, out, BF16ToF32);
      break;
    default:  // F32 (RequireDType let nothing else through)
      if (!out.empty()) std::memcpy(out.data(), t.data, out.size_bytes());
      break;
  }
  return Status::Ok();
}

}  // namespace kvferry::formats
