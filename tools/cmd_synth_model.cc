// `kvferry synth-model`: writes a random model of a given architecture and shape with a real
// tokenizer, as a Hugging Face directory and/or a GGUF file, so that real-model code paths
// (config parsing, sharding, dtypes, GGUF metadata, tokenizers, llama.cpp) can be exercised
// without downloading a checkpoint (docs/models.md, "kvferry synth-model").
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "engine/model/checkpoint_writer.h"
#include "engine/model/gguf_file_type.h"
#include "engine/model/gguf_tokenizer.h"
#include "engine/model/synthetic_model.h"
#include "kvferry/tokenizer/gguf_metadata.h"
#include "kvferry/tokenizer/tokenizer.h"
#include "tools/command_registry.h"

namespace {

namespace fs = std::filesystem;
using kvferry::Status;
using kvferry::StatusOr;
using kvferry::engine::ModelConfig;
using kvferry::engine::ModelWeights;

// Upper bound of the integer flags (widths, counts, positions): well above any real model, low
// enough that products of two of them fit in 64 bits.
constexpr int kMaxDim = 1 << 24;

struct SynthOptions {
  std::string arch = "llama";
  std::string tokenizer;
  int hidden = 256;
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;
  int head_dim = 0;
  int ffn = 0;
  int vocab_size = 0;
  int max_position = 4096;
  float rope_theta = 0.0f;
  bool tie_embeddings = false;
  std::string dtype = "bf16";
  bool pure = false;
  unsigned long long seed = 0;
  std::string out;
  int shards = 1;
  std::string gguf;
  // --arch deepseek (multi-head latent attention; --kv-heads and --head-dim do not apply).
  int q_lora_rank = 0;
  int kv_lora_rank = 64;
  int qk_nope_head_dim = 32;
  int qk_rope_head_dim = 16;
  int v_head_dim = 32;
  // Mixture of experts: --arch mixtral and qwen3moe, and deepseek with --experts.
  int experts = 0;
  int experts_per_token = 2;
  int expert_ffn = 0;
  int shared_experts = 0;
  int first_dense_layers = 0;
  int expert_groups = 1;
  int topk_groups = 1;
  std::string scoring = "sigmoid";
  float routed_scaling_factor = 1.0f;
};

// The tokenizer files of --tokenizer: tokenizer.json, and tokenizer_config.json when present.
struct TokenizerFiles {
  std::string json;
  std::string config;  // "" when absent
  kvferry::tokenizer::Tokenizer tokenizer;
};

StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return kvferry::NotFoundError("cannot read '" + path.string() + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

StatusOr<TokenizerFiles> LoadTokenizerFiles(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return kvferry::InvalidArgumentError("--tokenizer '" + dir.string() +
                                         "' is not a directory (it must hold tokenizer.json)");
  }
  KVF_ASSIGN_OR_RETURN(std::string json, ReadFile(dir / "tokenizer.json"));
  std::string config;
  if (fs::exists(dir / "tokenizer_config.json", ec)) {
    KVF_ASSIGN_OR_RETURN(config, ReadFile(dir / "tokenizer_config.json"));
  }
  KVF_ASSIGN_OR_RETURN(auto tok, kvferry::tokenizer::Tokenizer::FromHuggingFaceJson(json, config));
  return TokenizerFiles{std::move(json), std::move(config), std::move(tok)};
}

// --dtype: a float dtype (both outputs) or a quantized GGUF file type (--gguf only).
struct WeightFormat {
  kvferry::formats::DType dtype = kvferry::formats::DType::kBF16;
  std::optional<kvferry::engine::GgufFileType> quantized;
};

StatusOr<WeightFormat> ParseDType(const std::string& s, bool pure) {
  if (s == "f32") return WeightFormat{kvferry::formats::DType::kF32, std::nullopt};
  if (s == "f16") return WeightFormat{kvferry::formats::DType::kF16, std::nullopt};
  if (s == "bf16") return WeightFormat{kvferry::formats::DType::kBF16, std::nullopt};
  if (auto q = kvferry::engine::GgufFileTypeFromName(s)) {
    q->pure = pure;
    return WeightFormat{q->base, q};
  }
  return kvferry::InvalidArgumentError("--dtype '" + s + "': expected f32, f16, bf16, " +
                                       kvferry::engine::GgufFileTypeNames());
}

// The model's name: the output directory's, else the GGUF file's stem.
std::string ModelName(const SynthOptions& o) {
  if (!o.out.empty()) return fs::path(o.out).lexically_normal().filename().string();
  return fs::path(o.gguf).stem().string();
}

// The MoE flags into c.moe: --arch mixtral and qwen3moe (8 experts unless --experts says
// otherwise), deepseek with --experts > 0 (V3's sigmoid routing with the correction bias and
// normalised weights, or V2's softmax with --scoring softmax).
kvferry::Status MoeFromFlags(const SynthOptions& o, ModelConfig* c) {
  const bool deepseek = o.arch == "deepseek";
  const bool moe_arch = o.arch == "mixtral" || o.arch == "qwen3moe";
  const int experts = o.experts != 0 ? o.experts : (moe_arch ? 8 : 0);
  if (experts == 0) return Status::Ok();
  if (o.scoring != "sigmoid" && o.scoring != "softmax") {
    return kvferry::InvalidArgumentError("--scoring '" + o.scoring +
                                         "': expected sigmoid or softmax");
  }
  kvferry::engine::MoeShape& m = c->moe;
  m.num_experts = experts;
  m.experts_per_token = o.experts_per_token;
  m.expert_ffn_dim = o.expert_ffn != 0 ? o.expert_ffn : c->ffn_dim;
  m.norm_topk_prob = true;
  if (!deepseek) return Status::Ok();
  const bool v3 = o.scoring == "sigmoid";
  m.scoring = v3 ? kvferry::engine::MoeShape::Scoring::kSigmoid
                 : kvferry::engine::MoeShape::Scoring::kSoftmax;
  m.correction_bias = v3;
  m.norm_topk_prob = v3;
  m.shared_experts = o.shared_experts;
  m.first_dense_layers = o.first_dense_layers;
  m.num_groups = o.expert_groups;
  m.topk_groups = o.topk_groups;
  m.group_score_top = v3 ? 2 : 1;
  m.routed_scaling_factor = o.routed_scaling_factor;
  return Status::Ok();
}

StatusOr<ModelConfig> BuildConfig(const SynthOptions& o, const kvferry::tokenizer::Tokenizer& tok) {
  if (o.arch != "llama" && o.arch != "qwen2" && o.arch != "qwen3" && o.arch != "deepseek" &&
      o.arch != "mixtral" && o.arch != "qwen3moe") {
    return kvferry::InvalidArgumentError(
        "--arch '" + o.arch + "': expected llama, qwen2, qwen3, mixtral, qwen3moe or deepseek");
  }
  if (o.experts != 0 && (o.arch == "llama" || o.arch == "qwen2" || o.arch == "qwen3")) {
    return kvferry::InvalidArgumentError("--experts: --arch " + o.arch +
                                         " has no experts (mixtral, qwen3moe and deepseek do)");
  }
  if (o.arch == "deepseek" && !o.gguf.empty()) {
    return kvferry::InvalidArgumentError(
        "--gguf: DeepSeek (MLA) models are written as Hugging Face directories only (--out)");
  }
  if (o.vocab_size != 0 && o.vocab_size < tok.vocab_size()) {
    return kvferry::InvalidArgumentError("--vocab-size " + std::to_string(o.vocab_size) +
                                         " is smaller than the tokenizer's " +
                                         std::to_string(tok.vocab_size()) + " tokens");
  }
  const bool llama = o.arch == "llama" || o.arch == "mixtral";
  ModelConfig c;
  c.name = ModelName(o);
  c.architecture = o.arch == "mixtral" ? "llama" : o.arch;
  c.vocab_size = o.vocab_size != 0 ? o.vocab_size : tok.vocab_size();
  c.hidden_dim = o.hidden;
  c.num_layers = o.layers;
  c.num_heads = o.heads;
  c.num_kv_heads = o.kv_heads;
  c.head_dim = o.head_dim != 0 ? o.head_dim : (o.heads > 0 ? o.hidden / o.heads : 0);
  c.ffn_dim = o.ffn != 0 ? o.ffn : 3 * o.hidden;
  c.max_position = o.max_position;
  // The families' own values: Llama 3 500000 and 1e-5, Qwen2/3 1000000 and 1e-6.
  c.rope_theta = o.rope_theta != 0.0f ? o.rope_theta : (llama ? 500000.0f : 1000000.0f);
  c.rms_norm_eps = llama ? 1e-5f : 1e-6f;
  c.tie_embeddings = o.tie_embeddings;
  c.attention_bias = o.arch == "qwen2";
  c.qk_norm = o.arch == "qwen3" || o.arch == "qwen3moe";
  c.bos_token_id = tok.bos_token_id().value_or(-1);
  c.eos_token_ids = tok.eos_token_ids();
  c.weight_seed = o.seed;
  if (o.arch == "deepseek") {
    c.num_kv_heads = 1;  // the latent
    c.mla = {.q_lora_rank = o.q_lora_rank,
             .kv_lora_rank = o.kv_lora_rank,
             .qk_nope_head_dim = o.qk_nope_head_dim,
             .qk_rope_head_dim = o.qk_rope_head_dim,
             .v_head_dim = o.v_head_dim};
    c.head_dim = o.qk_nope_head_dim + o.qk_rope_head_dim;
    c.rope_theta = o.rope_theta != 0.0f ? o.rope_theta : 10000.0f;  // DeepSeek-V2/V3's
  }
  KVF_RETURN_IF_ERROR(MoeFromFlags(o, &c));
  KVF_RETURN_IF_ERROR(c.Validate());
  return c;
}

Status WriteJson(const fs::path& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) return kvferry::DataLossError("cannot write '" + path.string() + "'");
  return Status::Ok();
}

// generation_config.json: the ids that start and end a sequence, as transformers writes it.
nlohmann::json GenerationConfig(const ModelConfig& c) {
  nlohmann::json j = {{"_from_model_config", false}};
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  return j;
}

Status WriteHfDirectory(const SynthOptions& o, const ModelWeights& w, kvferry::formats::DType dt,
                        const TokenizerFiles& tok) {
  const fs::path dir = o.out;
  std::error_code ec;
  for (const char* existing : {"model.safetensors", "model.safetensors.index.json"}) {
    if (fs::exists(dir / existing, ec)) {
      // Another layout's files would stay beside the new ones and make the directory ambiguous.
      return kvferry::AlreadyExistsError("'" + o.out + "' already holds a checkpoint (" + existing +
                                         "); remove it or choose another --out");
    }
  }
  fs::create_directories(dir, ec);
  if (ec) return kvferry::DataLossError("cannot create '" + o.out + "': " + ec.message());
  KVF_RETURN_IF_ERROR(kvferry::engine::WriteHfCheckpoint(w, o.out, dt, o.shards));
  KVF_RETURN_IF_ERROR(WriteJson(dir / "generation_config.json", GenerationConfig(w.config)));
  for (const auto& [name, text] :
       {std::pair{"tokenizer.json", &tok.json}, std::pair{"tokenizer_config.json", &tok.config}}) {
    if (text->empty()) continue;
    std::ofstream out(dir / name, std::ios::binary);
    out << *text;
    if (!out) return kvferry::DataLossError("cannot write '" + (dir / name).string() + "'");
  }
  return Status::Ok();
}

Status WriteGguf(const SynthOptions& o, const ModelWeights& w, const WeightFormat& format,
                 const TokenizerFiles& tok) {
  KVF_ASSIGN_OR_RETURN(auto meta, kvferry::engine::GgufTokenizerFromHuggingFace(
                                      tok.json, tok.config, w.config.vocab_size));
  auto add_tokenizer = [&meta](kvferry::formats::GgufWriter* writer) {
    return kvferry::engine::AddGgufTokenizer(meta, writer);
  };
  if (format.quantized) {
    return kvferry::engine::WriteGgufCheckpoint(w, o.gguf, *format.quantized, add_tokenizer);
  }
  return kvferry::engine::WriteGgufCheckpoint(w, o.gguf, format.dtype, add_tokenizer);
}

Status Synthesize(const SynthOptions& o) {
  if (o.out.empty() && o.gguf.empty()) {
    return kvferry::InvalidArgumentError("nothing to write: give --out DIR and/or --gguf FILE");
  }
  KVF_ASSIGN_OR_RETURN(WeightFormat format, ParseDType(o.dtype, o.pure));
  if (o.pure && !format.quantized) {
    return kvferry::InvalidArgumentError("--pure applies to the quantized --dtype types");
  }
  if (format.quantized && !o.out.empty()) {
    return kvferry::InvalidArgumentError("--dtype " + o.dtype +
                                         " is a GGUF type: write it with --gguf FILE "
                                         "(safetensors has no quantized blocks)");
  }
  KVF_ASSIGN_OR_RETURN(TokenizerFiles tok, LoadTokenizerFiles(o.tokenizer));
  KVF_ASSIGN_OR_RETURN(ModelConfig config, BuildConfig(o, tok.tokenizer));
  KVF_ASSIGN_OR_RETURN(ModelWeights w,
                       kvferry::engine::SyntheticWeights(config, tok.tokenizer.vocab_size()));
  if (!o.out.empty()) KVF_RETURN_IF_ERROR(WriteHfDirectory(o, w, format.dtype, tok));
  if (!o.gguf.empty()) KVF_RETURN_IF_ERROR(WriteGguf(o, w, format, tok));
  std::string wrote = o.out.empty() ? "" : "HF directory " + o.out;
  if (!o.gguf.empty()) wrote += (wrote.empty() ? "GGUF " : ", GGUF ") + o.gguf;
  std::fprintf(stderr, "synth-model: %s, %lld parameters, vocab %d (tokenizer %d): %s\n",
               config.architecture.c_str(), static_cast<long long>(config.NumParameters()),
               config.vocab_size, tok.tokenizer.vocab_size(), wrote.c_str());
  return Status::Ok();
}

int RunSynthModel(const SynthOptions& o) {
  const Status s = Synthesize(o);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

void AddMoeOptions(CLI::App* sub, SynthOptions* o) {
  sub->add_option("--experts", o->experts,
                  "Routed experts per MoE layer (0: 8 for mixtral and qwen3moe, none for deepseek)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  sub->add_option("--experts-per-token", o->experts_per_token, "Experts each token runs (top-k)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub->add_option("--expert-ffn", o->expert_ffn, "Each expert's SwiGLU width (0: --ffn's)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxDim));
  sub->add_option("--shared-experts", o->shared_experts,
                  "deepseek: shared experts every token runs")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  sub->add_option("--first-dense-layers", o->first_dense_layers,
                  "deepseek: leading layers with a dense MLP (first_k_dense_replace)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxDim));
  sub->add_option("--expert-groups", o->expert_groups,
                  "deepseek: expert groups of group-limited routing (n_group)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub->add_option("--topk-groups", o->topk_groups,
                  "deepseek: groups a token's experts may come from (topk_group)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub->add_option("--scoring", o->scoring,
                  "deepseek: sigmoid (V3: correction bias, weights normalised) or softmax (V2)")
      ->capture_default_str();
  sub->add_option("--routed-scaling-factor", o->routed_scaling_factor,
                  "deepseek: factor on the routed experts' weights")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

void AddSynthModel(CLI::App& app) {
  auto o = std::make_shared<SynthOptions>();
  auto* sub = app.add_subcommand(
      "synth-model",
      "Write a random model with a real tokenizer (a Hugging Face directory and/or GGUF)");
  sub->add_option("--arch", o->arch,
                  "llama, qwen2 (q/k/v biases), qwen3 (q/k norms), mixtral and qwen3moe "
                  "(mixture of experts), or deepseek (multi-head latent attention, dense or with "
                  "--experts; Hugging Face directory only)")
      ->capture_default_str();
  AddMoeOptions(sub, o.get());
  sub->add_option("--tokenizer", o->tokenizer,
                  "Directory with tokenizer.json (and optionally tokenizer_config.json)")
      ->required();
  sub->add_option("--hidden", o->hidden, "Model width")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxDim));
  sub->add_option("--layers", o->layers, "Decoder layers")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxDim));
  sub->add_option("--heads", o->heads, "Query heads")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxDim));
  sub->add_option("--kv-heads", o->kv_heads, "Key/value heads (divides --heads)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxDim));
  sub->add_option("--head-dim", o->head_dim, "Head dimension, even (0: hidden / heads)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxDim));
  sub->add_option("--q-lora-rank", o->q_lora_rank, "deepseek: low-rank query width (0: q_proj)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxDim));
  sub->add_option("--kv-lora-rank", o->kv_lora_rank, "deepseek: latent width (cached per token)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxDim));
  sub->add_option("--qk-nope-head-dim", o->qk_nope_head_dim,
                  "deepseek: per-head key width without RoPE")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxDim));
  sub->add_option("--qk-rope-head-dim", o->qk_rope_head_dim,
                  "deepseek: rope key width, even (cached per token)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxDim));
  sub->add_option("--v-head-dim", o->v_head_dim, "deepseek: per-head value width")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxDim));
  sub->add_option("--ffn", o->ffn, "SwiGLU intermediate width (0: 3 x hidden)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxDim));
  sub->add_option("--vocab-size", o->vocab_size,
                  "Embedding rows, at least the tokenizer's token count (0: exactly that count); "
                  "rows beyond the tokenizer are padding, [PAD<id>] in GGUF, never predicted")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxDim));
  sub->add_option("--max-position", o->max_position, "Longest sequence the model accepts")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxDim));
  sub->add_option("--rope-theta", o->rope_theta,
                  "RoPE base (0: the family's, 500000 for llama, 1000000 for qwen2/qwen3)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--tie-embeddings", o->tie_embeddings,
                "lm_head shares the token embedding (no lm_head.weight / output.weight)");
  sub->add_option("--dtype", o->dtype,
                  "Weight dtype of the matrices: f32, f16, bf16, or (GGUF only, each matrix in "
                  "the type llama-quantize assigns it) q8_0, q4_0, q5_0, q4_1, q5_1, q4_k_s, "
                  "q4_k_m, q5_k_s, q5_k_m or q6_k; norms and biases stay f32")
      ->capture_default_str();
  sub->add_flag("--pure", o->pure,
                "With a quantized --dtype: every matrix in its base type (llama-quantize --pure)");
  sub->add_option("--seed", o->seed, "Seed of the random weights (same seed, same bits)")
      ->capture_default_str();
  sub->add_option("--out", o->out,
                  "Hugging Face directory to write (created): config.json, "
                  "generation_config.json, model.safetensors, the tokenizer files");
  sub->add_option("--shards", o->shards,
                  "With --out: safetensors shards (model-0000i-of-0000n.safetensors + index)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxDim));
  sub->add_option("--gguf", o->gguf,
                  "GGUF file to write: the same weights, the tokenizer and chat template embedded");
  sub->callback([o] { throw CLI::RuntimeError(RunSynthModel(*o)); });
}
KVF_REGISTER_COMMAND(AddSynthModel);

}  // namespace
