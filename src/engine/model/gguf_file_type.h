// The quantized GGUF file types kvferry writes (`synth-model --dtype`, `quantize --type`) and
// the type each tensor takes in them, as llama.cpp's llama-quantize assigns it (internal; the
// checkpoint writer and the CLI call it).
//
// A file type names a base type: q8_0, q4_0, q5_0, q4_1, q5_1 (every matrix in that type), q6_k,
// and the mixtures q4_k_s, q4_k_m (base Q4_K), q5_k_s, q5_k_m (base Q5_K). llama-quantize's
// choices, for the architectures kvferry writes:
//   - output.weight (or token_embd.weight where the embeddings are tied): Q6_K, or Q8_0 for the
//     q8_0 file type;
//   - _M mixtures: attn_v and ffn_down in Q6_K in the layers where "more bits" pay (the first
//     and last eighth of the layers and every third one between: use_more_bits);
//   - q4_k_s: attn_v in Q5_K in the first 4 layers, ffn_down in Q5_K in the first eighth;
//   - every other matrix in the base type;
//   - a matrix whose rows are not whole 256-value super-blocks takes llama-quantize's fallback
//     (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), and F16 if even those blocks do not fit; rows
//     that are not whole 32-value blocks of a 32-value type keep it (the writer refuses them,
//     as llama-quantize does).
// `pure` (llama-quantize --pure) puts every matrix in the base type.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kvferry/formats/dtype.h"

namespace kvferry::engine {

struct GgufFileType {
  std::string name;  // "q4_k_m": the CLI's spelling
  formats::DType base = formats::DType::kQ8_0;
  int32_t llama_ftype = 0;  // general.file_type, llama.cpp's number for it
  bool pure = false;
};

std::optional<GgufFileType> GgufFileTypeFromName(std::string_view name);

// "q8_0, q4_0, ..." for help texts and refusals.
std::string GgufFileTypeNames();

// The type of the GGUF matrix `tensor` ("blk.3.attn_v.weight"), whose rows hold `cols` values,
// in a model of `n_layers` layers that has (`has_output`) or ties away its output.weight and has
// `n_experts` routed experts per MoE layer (0: dense). An MoE router (ffn_gate_inp) stays F32,
// as llama-quantize leaves it; with 8 experts attn_v and attn_k take Q8_0 and, in q4_k_s and
// q4_k_m, attn_output Q5_K (llama-quantize's rules for Mixtral-like models).
formats::DType GgufTensorType(const GgufFileType& type, std::string_view tensor, int32_t n_layers,
                              int64_t cols, bool has_output, int32_t n_experts = 0);

}  // namespace kvferry::engine
