#include "engine/model/gguf_file_type.h"

#include <cstdio>

namespace kvferry::engine {
namespace {

using formats::DType;

struct Entry {
  const char* name;
  DType base;
  int32_t llama_ftype;  // llama.cpp's LLAMA_FTYPE_MOSTLY_*
};
constexpr Entry kTypes[] = {{"q8_0", DType::kQ8_0, 7},    {"q4_0", DType::kQ4_0, 2},
                            {"q5_0", DType::kQ5_0, 8},    {"q4_1", DType::kQ4_1, 3},
                            {"q5_1", DType::kQ5_1, 9},    {"q4_k_s", DType::kQ4_K, 14},
                            {"q4_k_m", DType::kQ4_K, 15}, {"q5_k_s", DType::kQ5_K, 16},
                            {"q5_k_m", DType::kQ5_K, 17}, {"q6_k", DType::kQ6_K, 18}};

// llama-quantize's layers where more bits pay: the first and last eighth, every third between.
bool UseMoreBits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

// The layer of "blk.N.<name>", or -1.
int LayerOf(std::string_view tensor) {
  int layer = -1;
  if (std::sscanf(std::string(tensor).c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// llama-quantize's choice before the row-length check.
DType Choose(const GgufFileType& t, std::string_view tensor, int32_t n_layers, bool has_output,
             int32_t n_experts) {
  if (tensor == "output.weight" || (!has_output && tensor == "token_embd.weight")) {
    return t.base == DType::kQ8_0 ? DType::kQ8_0 : DType::kQ6_K;
  }
  const int layer = LayerOf(tensor);
  const bool m = t.name == "q4_k_m" || t.name == "q5_k_m";
  if (n_experts == 8) {
    if (Contains(tensor, "attn_v.weight") || Contains(tensor, "attn_k.weight")) return DType::kQ8_0;
    if (Contains(tensor, "attn_output.weight") && (t.name == "q4_k_s" || t.name == "q4_k_m")) {
      return DType::kQ5_K;
    }
  }
  if (Contains(tensor, "attn_v.weight")) {
    if (m && UseMoreBits(layer, n_layers)) return DType::kQ6_K;
    if (t.name == "q4_k_s" && layer < 4) return DType::kQ5_K;
  } else if (Contains(tensor, "ffn_down")) {
    if (m && UseMoreBits(layer, n_layers)) return DType::kQ6_K;
    if (t.name == "q4_k_s" && layer < n_layers / 8) return DType::kQ5_K;
  }
  return t.base;
}

// llama-quantize's fallback for rows that are not whole super-blocks.
DType Fallback(DType d) {
  switch (d) {
    case DType::kQ4_K:
      return DType::kQ5_0;
    case DType::kQ5_K:
      return DType::kQ5_1;
    case DType::kQ6_K:
      return DType::kQ8_0;
    default:
      return d;
  }
}

}  // namespace

std::optional<GgufFileType> GgufFileTypeFromName(std::string_view name) {
  for (const Entry& e : kTypes) {
    if (name == e.name) return GgufFileType{e.name, e.base, e.llama_ftype, false};
  }
  return std::nullopt;
}

std::string GgufFileTypeNames() {
  std::string out;
  for (const Entry& e : kTypes) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

DType GgufTensorType(const GgufFileType& type, std::string_view tensor, int32_t n_layers,
                     int64_t cols, bool has_output, int32_t n_experts) {
  if (Contains(tensor, "ffn_gate_inp")) return DType::kF32;
  const DType d = type.pure ? type.base : Choose(type, tensor, n_layers, has_output, n_experts);
  if (cols % formats::DTypeBlockElements(d) == 0) return d;
  const DType fallback = Fallback(d);
  if (fallback == d) return d;  // a 32-value type: the writer refuses the rows, as llama-quantize
  return cols % formats::DTypeBlockElements(fallback) == 0 ? fallback : DType::kF16;
}

}  // namespace kvferry::engine
