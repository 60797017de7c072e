// Loading mixture-of-experts checkpoints (Mixtral, Qwen3-MoE, DeepSeek-V2/V3): a Hugging Face
// directory (per-expert tensors) and a GGUF file (3-D expert tensors) give the engine the built-in
// model bit for bit; quantized expert tensors compute in their blocks at every TP size; and
// expert tensors or MoE fields that disagree with the config are errors naming them.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/engine_test_util.h"
#include "engine/model/checkpoint_writer.h"
#include "engine/model/model_loader.h"
#include "engine/weights.h"
#include "kvferry/engine/engine.h"
#include "kvferry/formats/gguf.h"
#include "kvferry/formats/gguf_writer.h"

namespace kvferry::engine {
namespace {

namespace fs = std::filesystem;
using formats::DType;
using testing_util::Completion;

fs::path MoeScratch(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / ("kvferry_moe_loader_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Greedy tokens and logprobs of a short and a long prompt on `model`.
Completion MoeGenerate(const std::string& model, int32_t tp = 1) {
  EngineConfig c;
  c.model = model;
  c.tensor_parallel_size = tp;
  c.tokenizer = "byte-level";
  c.block_size = 32;
  c.num_threads = 2;
  auto engine = Engine::Create(c);
  EXPECT_TRUE(engine.ok()) << model << ": " << engine.status();
  if (!engine.ok()) return {};
  SamplingParams sp;
  sp.max_tokens = 8;
  sp.ignore_eos = true;
  std::vector<int32_t> long_prompt;
  for (int32_t i = 0; i < 90; ++i) long_prompt.push_back(1 + (i * 41) % 200);
  EXPECT_TRUE((*engine)->AddRequest("a", {1, 7, 3}, sp).ok());
  EXPECT_TRUE((*engine)->AddRequest("b", long_prompt, sp).ok());
  auto all = testing_util::RunToEnd(**engine);
  Completion both = all["a"];
  both.tokens.insert(both.tokens.end(), all["b"].tokens.begin(), all["b"].tokens.end());
  both.logprobs.insert(both.logprobs.end(), all["b"].logprobs.begin(), all["b"].logprobs.end());
  return both;
}

void EditMoeConfig(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  edit(j);
  std::ofstream(dir / "config.json") << j.dump();
}

void ExpectRefused(const fs::path& model, const std::string& needle) {
  auto w = LoadModelWeights(model);
  ASSERT_FALSE(w.ok()) << model;
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument) << w.status();
  EXPECT_NE(w.status().message().find(needle), std::string_view::npos) << w.status();
}

TEST(MoeLoaderTest, HuggingFaceAndGgufAreTheBuiltinModel) {
  for (const char* name : {"tiny-moe", "tiny-mla-moe"}) {
    SCOPED_TRACE(name);
    const ModelWeights w = *GenerateWeights(*BuiltinModelConfig(name));
    const fs::path dir = MoeScratch(std::string(name) + "_hf");
    ASSERT_TRUE(WriteHfCheckpoint(w, dir, DType::kF32).ok());
    const Completion builtin = MoeGenerate(name);
    ASSERT_FALSE(builtin.tokens.empty());
    testing_util::ExpectSameCompletion(builtin, MoeGenerate(dir), "HF directory");
    if (w.config.is_mla()) continue;  // DeepSeek is read from Hugging Face directories only
    ASSERT_TRUE(WriteGgufCheckpoint(w, dir / "m.gguf", DType::kF32, nullptr).ok());
    testing_util::ExpectSameCompletion(builtin, MoeGenerate(dir / "m.gguf"), "GGUF");
  }
}

// Every expert tensor in Q8_0 or Q4_K (as llama-quantize writes q8_0 and q4_k_m), computed in
// its blocks: the same bits at TP 1, 2 and 4 (the experts split over the ranks whole).
TEST(MoeLoaderTest, QuantizedExpertsComputeInTheirBlocksAtEveryTpSize) {
  ModelConfig c = *BuiltinModelConfig("tiny-moe");
  c.hidden_dim = 256;
  c.num_heads = 8;
  c.head_dim = 128;  // o_proj's 4 leaves whole super-blocks (with 8 experts it is Q5_K)
  c.moe.expert_ffn_dim = 256;
  const ModelWeights w = *GenerateWeights(c);
  for (const char* type : {"q8_0", "q4_k_m"}) {
    SCOPED_TRACE(type);
    const fs::path file = MoeScratch(type) / "m.gguf";
    ASSERT_TRUE(WriteGgufCheckpoint(w, file, *GgufFileTypeFromName(type), nullptr).ok());
    auto loaded = LoadModelWeights(file);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const DType base = std::string(type) == "q8_0" ? DType::kQ8_0 : DType::kQ4_K;
    EXPECT_EQ(loaded->layers[0].expert_up[3].dtype, base);
    EXPECT_EQ(loaded->layers[0].router.dtype, DType::kF32);  // llama-quantize leaves it
    const Completion tp1 = MoeGenerate(file);
    ASSERT_FALSE(tp1.tokens.empty());
    for (int32_t tp : {2, 4}) {
      const Completion other = MoeGenerate(file, tp);
      EXPECT_EQ(other.tokens, tp1.tokens) << "TP " << tp;
      EXPECT_EQ(0, std::memcmp(other.logprobs.data(), tp1.logprobs.data(),
                               tp1.logprobs.size() * sizeof(float)))
          << "TP " << tp;
    }
  }
}

TEST(MoeLoaderTest, ExpertTensorsThatDisagreeWithTheConfigAreNamed) {
  const ModelWeights w = *GenerateWeights(*BuiltinModelConfig("tiny-moe"));
  const fs::path dir = MoeScratch("disagree");
  ASSERT_TRUE(WriteHfCheckpoint(w, dir, DType::kF32).ok());
  // The router is bound first: its row count is the expert count.
  EditMoeConfig(dir, [](auto& j) { j["num_local_experts"] = 9; });
  ExpectRefused(dir, "'model.layers.0.block_sparse_moe.gate.weight' in '" +
                         (dir / "model.safetensors").string() +
                         "' has shape [8, 128], the config needs [9, 128]");
  EditMoeConfig(dir, [](auto& j) { j["num_local_experts"] = 7; });
  ExpectRefused(dir, "the config needs [7, 128]");
  EditMoeConfig(dir, [](auto& j) {
    j["num_local_experts"] = 8;
    j["intermediate_size"] = 64;
  });
  ExpectRefused(dir, "tensor 'model.layers.0.block_sparse_moe.experts.0.w1.weight'");
  EditMoeConfig(dir, [](auto& j) {
    j["num_local_experts"] = 8;
    j["num_experts_per_tok"] = 9;
  });
  ExpectRefused(dir, "experts_per_token");

  // A GGUF whose 3-D expert tensor holds 7 experts where the metadata says 8.
  ASSERT_TRUE(WriteGgufCheckpoint(w, dir / "good.gguf", DType::kF32, nullptr).ok());
  auto good = formats::GgufFile::Open(dir / "good.gguf");
  ASSERT_TRUE(good.ok()) << good.status();
  formats::GgufWriter writer;
  for (const auto& [key, value] : good->metadata().entries()) {
    if (key != "general.alignment") ASSERT_TRUE(writer.AddMetadata(key, value).ok());
  }
  for (const formats::TensorView& t : good->tensors()) {
    std::vector<int64_t> shape = t.shape;
    size_t bytes = t.size_bytes;
    if (t.name == "blk.1.ffn_down_exps.weight") {
      shape[0] = 7;
      bytes = bytes / 8 * 7;
    }
    ASSERT_TRUE(writer.AddTensor(t.name, t.dtype, shape, {t.data, t.data + bytes}).ok());
  }
  ASSERT_TRUE(writer.Write(dir / "bad.gguf").ok());
  ExpectRefused(dir / "bad.gguf", "tensor 'blk.1.ffn_down_exps.weight'");
}

TEST(MoeLoaderTest, UnsupportedMoeFieldsAreRefusedByName) {
  const ModelWeights w = *GenerateWeights(*BuiltinModelConfig("tiny-mla-moe"));
  const fs::path dir = MoeScratch("fields");
  ASSERT_TRUE(WriteHfCheckpoint(w, dir, DType::kF32).ok());
  ASSERT_TRUE(LoadModelWeights(dir).ok());
  const std::pair<std::function<void(nlohmann::json&)>, std::string> cases[] = {
      {[](auto& j) { j["moe_layer_freq"] = 2; }, "moe_layer_freq"},
      {[](auto& j) { j["scoring_func"] = "tanh"; }, "scoring_func"},
      {[](auto& j) { j["topk_method"] = "random"; }, "topk_method"},
      {[](auto& j) { j["n_group"] = 3; }, "num_groups must divide num_experts"},
      {[](auto& j) { j["first_k_dense_replace"] = 9; }, "first_dense_layers"},
  };
  for (const auto& [edit, needle] : cases) {
    ASSERT_TRUE(WriteHfCheckpoint(w, MoeScratch("fields"), DType::kF32).ok());
    EditMoeConfig(dir, edit);
    ExpectRefused(dir, needle);
  }
  // Qwen3-MoE with dense layers between the sparse ones.
  ModelConfig q = *BuiltinModelConfig("tiny-moe");
  q.architecture = "qwen3moe";
  q.qk_norm = true;
  const fs::path qdir = MoeScratch("qwen3moe");
  ASSERT_TRUE(WriteHfCheckpoint(*GenerateWeights(q), qdir, DType::kF32).ok());
  ASSERT_TRUE(LoadModelWeights(qdir).ok());
  EditMoeConfig(qdir, [](auto& j) { j["mlp_only_layers"] = {1}; });
  ExpectRefused(qdir, "mlp_only_layers");
}

}  // namespace
}  // namespace kvferry::engine
