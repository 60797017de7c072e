// libFuzzer target: formats::ParseSafetensors (include/kvferry/formats/safetensors.h) over
// arbitrary file bytes.
//
// Properties: no crash or sanitizer report; every tensor of an accepted file lies inside the
// input and is TensorBytes(dtype, shape) long; what was read, written again with
// SafetensorsWriter, parses back to the same metadata and tensors (names, dtypes, shapes, bytes).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "kvferry/formats/safetensors.h"
#include "kvferry/formats/safetensors_writer.h"

namespace {

using namespace kvferry::formats;

bool Inside(const TensorView& t, std::span<const std::byte> bytes) {
  return t.data >= bytes.data() && t.size_bytes <= bytes.size() &&
         t.data - bytes.data() <= static_cast<std::ptrdiff_t>(bytes.size() - t.size_bytes);
}

bool SameTensor(const TensorView& a, const TensorView& b) {
  return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape &&
         a.size_bytes == b.size_bytes &&
         (a.size_bytes == 0 || std::memcmp(a.data, b.data, a.size_bytes) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto parsed = ParseSafetensors(bytes, "fuzz");
  if (!parsed.ok()) return 0;
  SafetensorsWriter writer;
  for (const auto& [key, value] : parsed->metadata) writer.SetMetadata(key, value);
  for (const TensorView& t : parsed->tensors) {
    auto want = TensorBytes(t.dtype, t.shape);
    if (!Inside(t, bytes) || !want.ok() || *want != t.size_bytes) std::abort();
    if (!writer.AddTensor(t.name, t.dtype, t.shape, t.bytes()).ok()) std::abort();
  }
  const std::vector<std::byte> rewritten = writer.Bytes();
  auto again = ParseSafetensors(rewritten, "rewritten");
  if (!again.ok() || again->metadata != parsed->metadata) std::abort();
  if (again->tensors.size() != parsed->tensors.size()) std::abort();
  for (size_t i = 0; i < again->tensors.size(); ++i) {
    if (!SameTensor(again->tensors[i], parsed->tensors[i])) std::abort();
  }
  return 0;
}
