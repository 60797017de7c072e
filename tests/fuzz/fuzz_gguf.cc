// libFuzzer target: formats::ParseGguf (include/kvferry/formats/gguf.h) over arbitrary file
// bytes.
//
// Properties: no crash, sanitizer report or allocation beyond the input's size (the counts are
// checked before use); every tensor of an accepted file lies inside the input at a multiple of
// the alignment from the data section and is TensorBytes(dtype, shape) long; what was read,
// written again with GgufWriter (when the writer takes it: tensor names of at most 63 bytes),
// parses back to the same alignment, metadata (floats compared bit for bit) and tensors.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvferry/formats/gguf.h"
#include "kvferry/formats/gguf_writer.h"

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

// Equal, NaNs included: floats by their bits.
bool SameValue(const GgufValue& a, const GgufValue& b) {
  return a.type == b.type && a.is_array == b.is_array && a.ints == b.ints &&
         a.strings == b.strings && a.floats.size() == b.floats.size() &&
         (a.floats.empty() ||
          std::memcmp(a.floats.data(), b.floats.data(), a.floats.size() * sizeof(double)) == 0);
}

// The entries but general.alignment, which the writer places itself.
std::vector<const std::pair<std::string, GgufValue>*> Entries(const GgufMetadata& m) {
  std::vector<const std::pair<std::string, GgufValue>*> out;
  for (const auto& e : m.entries()) {
    if (e.first != kGgufAlignmentKey) out.push_back(&e);
  }
  return out;
}

void CheckParsed(const GgufContents& c, std::span<const std::byte> bytes) {
  if (c.data_offset % c.alignment != 0 && c.data_offset != bytes.size()) std::abort();
  for (const TensorView& t : c.tensors) {
    auto want = TensorBytes(t.dtype, t.shape);
    if (!Inside(t, bytes) || !want.ok() || *want != t.size_bytes) std::abort();
    if ((t.data - bytes.data() - c.data_offset) % c.alignment != 0) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto parsed = ParseGguf(bytes, "fuzz");
  if (!parsed.ok()) return 0;
  CheckParsed(*parsed, bytes);
  GgufWriter writer;
  if (!writer.SetAlignment(parsed->alignment).ok()) std::abort();
  const auto entries = Entries(parsed->metadata);
  for (const auto* e : entries) {
    if (!writer.AddMetadata(e->first, e->second).ok()) std::abort();
  }
  for (const TensorView& t : parsed->tensors) {
    if (t.name.size() > kGgufMaxTensorNameBytes) return 0;  // valid, but not for llama.cpp
    if (!writer.AddTensor(t.name, t.dtype, t.shape, t.bytes()).ok()) std::abort();
  }
  const std::vector<std::byte> rewritten = writer.Bytes();
  auto again = ParseGguf(rewritten, "rewritten");
  if (!again.ok() || again->version != 3 || again->alignment != parsed->alignment) std::abort();
  const auto again_entries = Entries(again->metadata);
  if (again_entries.size() != entries.size()) std::abort();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (again_entries[i]->first != entries[i]->first ||
        !SameValue(again_entries[i]->second, entries[i]->second)) {
      std::abort();
    }
  }
  if (again->tensors.size() != parsed->tensors.size()) std::abort();
  for (size_t i = 0; i < again->tensors.size(); ++i) {
    if (!SameTensor(again->tensors[i], parsed->tensors[i])) std::abort();
  }
  return 0;
}
