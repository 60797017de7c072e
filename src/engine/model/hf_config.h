// The model config of a Hugging Face checkpoint: config.json (and generation_config.json's eos
// ids) to ModelConfig, and back (the writer the tests and `kvferry synth-model` use).
//
// Accepted architectures: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and
// Qwen3ForCausalLM (docs/models.md). Anything the engine cannot compute exactly as the
// reference defines it is refused with an error naming the field: another architecture,
// hidden_act other than silu, mlp_bias, attention_bias on Llama (it would bias o_proj too),
// rope_scaling types other than linear and llama3, a Qwen2 sliding window in use. Mistral's
// sliding_window is honoured by capping max_position at the window, where attention with and
// without the window is the same computation.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kvferry/common/status.h"
#include "kvferry/engine/model_config.h"

namespace kvferry::engine {

// `config` is config.json's object; `generation` generation_config.json's (or null). `name`
// becomes ModelConfig::name. InvalidArgument naming the field for anything refused or missing.
StatusOr<ModelConfig> ModelConfigFromHf(const nlohmann::json& config,
                                        const nlohmann::json& generation, std::string name);

// config.json for `c` (architectures, sizes, rope, eos/bos, torch_dtype `dtype_name`).
nlohmann::json HfConfigJson(const ModelConfig& c, const std::string& dtype_name);

}  // namespace kvferry::engine
