// Loading checkpoints: a Hugging Face directory (single file and sharded), a GGUF file and a
// kvferry safetensors file give the engine the same model, bit for bit, for every supported
// architecture; F16/BF16 weights compute exactly as F32 weights holding the same values; and
// every malformed or unsupported checkpoint is an error naming what is wrong.
#include "engine/model/model_loader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/engine_test_util.h"
#include "engine/kernels/quant_q8_0.h"
#include "engine/kernels/quant_types.h"
#include "engine/model/checkpoint_writer.h"
#include "engine/weights.h"
#include "kvferry/engine/engine.h"
#include "kvferry/formats/gguf.h"
#include "kvferry/formats/safetensors_model.h"
#include "kvferry/formats/safetensors_writer.h"

namespace kvferry::engine {
namespace {

namespace fs = std::filesystem;
using formats::DType;
using testing_util::Completion;

fs::path Scratch(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / ("kvferry_loader_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Greedy tokens and logprobs of two prompts (one crossing kernel blocks of 64) on `model`.
Completion Generate(const std::string& model, int32_t tensor_parallel_size = 1) {
  EngineConfig c;
  c.model = model;
  c.tensor_parallel_size = tensor_parallel_size;
  c.tokenizer = "byte-level";  // these checkpoints carry no tokenizer files
  c.block_size = 64;
  c.num_threads = 2;
  auto engine = Engine::Create(c);
  EXPECT_TRUE(engine.ok()) << model << ": " << engine.status();
  if (!engine.ok()) return {};
  SamplingParams sp;
  sp.max_tokens = 8;
  sp.ignore_eos = true;
  std::vector<int32_t> long_prompt;
  for (int32_t i = 0; i < 150; ++i) long_prompt.push_back(1 + (i * 37) % 200);
  EXPECT_TRUE((*engine)->AddRequest("a", {1, 5, 9, 2}, sp).ok());
  EXPECT_TRUE((*engine)->AddRequest("b", long_prompt, sp).ok());
  auto all = testing_util::RunToEnd(**engine);
  Completion both = all["a"];
  both.tokens.insert(both.tokens.end(), all["b"].tokens.begin(), all["b"].tokens.end());
  both.logprobs.insert(both.logprobs.end(), all["b"].logprobs.begin(), all["b"].logprobs.end());
  return both;
}

ModelConfig Variant(const std::string& arch) {
  ModelConfig c = *BuiltinModelConfig("tiny-odd");
  c.name = "test-" + arch;
  c.architecture = arch;
  c.attention_bias = arch == "qwen2";
  c.qk_norm = arch == "qwen3";
  if (arch == "llama") {
    c.rope_theta = 500000.0f;
    c.rope_scaling = {
        RopeScaling::Type::kLlama3, 8.0f, 1.0f, 4.0f, 64, {}, 32.0f, 1.0f, 1.0f, 0.0f};
  }
  return c;
}

TEST(ModelLoaderTest, BuiltinThroughAHuggingFaceDirectoryIsTheSameModel) {
  const ModelWeights tiny = *GenerateWeights(*BuiltinModelConfig("tiny"));
  const fs::path one = Scratch("hf1"), sharded = Scratch("hf3"), file = Scratch("file");
  ASSERT_TRUE(WriteHfCheckpoint(tiny, one, DType::kF32).ok());
  ASSERT_TRUE(WriteHfCheckpoint(tiny, sharded, DType::kF32, 3).ok());
  ASSERT_TRUE(fs::exists(sharded / "model.safetensors.index.json"));
  ASSERT_TRUE(SaveCheckpoint(tiny, file / "tiny.safetensors").ok());
  const Completion builtin = Generate("tiny");
  testing_util::ExpectSameCompletion(builtin, Generate(one), "HF directory");
  testing_util::ExpectSameCompletion(builtin, Generate(sharded), "sharded HF directory");
  testing_util::ExpectSameCompletion(builtin, Generate(file / "tiny.safetensors"), "kvferry file");
}

// For Llama (with Llama 3.1 rope scaling: rope_freqs in GGUF), Qwen2 and Qwen3: the GGUF file
// and the Hugging Face directory of the same weights give the same bits, in BF16 and F16; and a
// BF16 model equals an F32 model holding the same values (the kernels convert exactly).
TEST(ModelLoaderTest, GgufEqualsHuggingFaceAndHalfEqualsF32OfSameValues) {
  for (const std::string arch : {"llama", "qwen2", "qwen3"}) {
    SCOPED_TRACE(arch);
    const ModelWeights w = *GenerateWeights(Variant(arch));
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      const std::string tag = arch + "_" + std::string(formats::DTypeName(dtype));
      const fs::path hf = Scratch(tag + "_hf"), gguf = Scratch(tag + "_gguf");
      ASSERT_TRUE(WriteHfCheckpoint(w, hf, dtype).ok());
      ASSERT_TRUE(WriteGgufCheckpoint(w, gguf / "m.gguf", dtype, nullptr).ok());
      const Completion from_hf = Generate(hf);
      testing_util::ExpectSameCompletion(from_hf, Generate(gguf / "m.gguf"), tag + " GGUF vs HF");
      // The same values in F32 storage.
      auto half = LoadModelWeights(hf);
      ASSERT_TRUE(half.ok()) << half.status();
      EXPECT_EQ(half->layers[0].q.dtype, dtype);
      const fs::path f32 = Scratch(tag + "_f32");
      ASSERT_TRUE(WriteHfCheckpoint(*half, f32, DType::kF32).ok());
      testing_util::ExpectSameCompletion(from_hf, Generate(f32),
                                         tag + " vs F32 of the same values");
    }
  }
}

TEST(ModelLoaderTest, WeightsAreMappedNotCopied) {
  const ModelWeights w = *GenerateWeights(Variant("qwen3"));
  const fs::path hf = Scratch("mapped");
  ASSERT_TRUE(WriteHfCheckpoint(w, hf, DType::kBF16).ok());
  auto loaded = LoadModelWeights(hf);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  // One owner: the file mapping (the q/k/v of a Hugging Face model need no copy).
  EXPECT_EQ(loaded->storage.size(), 1u);
  EXPECT_EQ(loaded->layers[1].up.dtype, DType::kBF16);
}

// ---- refused and malformed checkpoints ----

fs::path WriteTiny(const std::string& name) {
  const fs::path dir = Scratch(name);
  EXPECT_TRUE(WriteHfCheckpoint(*GenerateWeights(Variant("llama")), dir, DType::kF32).ok());
  return dir;
}

void EditConfig(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  edit(j);
  std::ofstream(dir / "config.json") << j.dump();
}

// tiny's layout at 256 wide (8 heads of 128, FFN 1024): every row, and every row-parallel leaf
// (4 of o_proj's 1024 columns, of down_proj's 1024), whole k-quant super-blocks.
ModelConfig KQuantTiny() {
  ModelConfig c = *BuiltinModelConfig("tiny");
  c.hidden_dim = 256;
  c.num_heads = 8;
  c.head_dim = 128;
  c.ffn_dim = 1024;
  return c;
}

void ExpectError(const fs::path& model, StatusCode code, const std::string& needle) {
  auto w = LoadModelWeights(model);
  ASSERT_FALSE(w.ok()) << model;
  EXPECT_EQ(w.status().code(), code) << w.status();
  EXPECT_NE(w.status().message().find(needle), std::string_view::npos) << w.status();
}

TEST(ModelLoaderTest, RefusedConfigsNameTheField) {
  const fs::path dir = WriteTiny("cfg");
  EditConfig(dir, [](auto& j) { j["architectures"] = {"GPT2LMHeadModel"}; });
  ExpectError(dir, StatusCode::kInvalidArgument, "GPT2LMHeadModel");
  EditConfig(dir, [](auto& j) {
    j["architectures"] = {"LlamaForCausalLM"};
    j["hidden_act"] = "gelu";
  });
  ExpectError(dir, StatusCode::kInvalidArgument, "hidden_act");
  EditConfig(dir, [](auto& j) {
    j["hidden_act"] = "silu";
    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
  });
  ExpectError(dir, StatusCode::kInvalidArgument, "yarn");
  EditConfig(dir, [](auto& j) {
    j.erase("rope_scaling");
    j["num_key_value_heads"] = 4;  // does not divide 6 heads
  });
  ExpectError(dir, StatusCode::kInvalidArgument, "num_kv_heads");
  EditConfig(dir, [](auto& j) { j.erase("num_hidden_layers"); });
  ExpectError(dir, StatusCode::kInvalidArgument, "num_hidden_layers");
}

// A DeepSeek-shaped Hugging Face directory (DeepseekV3ForCausalLM config, MLA tensor names, the
// rope rows in the checkpoints' interleaved pair order) and a kvferry file of the same weights
// are the model they were written from: tiny-mla itself, and a variant without q_lora_rank and
// with yarn rope scaling. The writer interleaves and the loader de-interleaves; a loader that
// forgot to would rotate the wrong pairs and change the output.
TEST(ModelLoaderTest, DeepseekMlaThroughAHuggingFaceDirectoryIsTheSameModel) {
  const fs::path hf = Scratch("mla_hf"), file = Scratch("mla_file");
  const ModelWeights mla = *GenerateWeights(*BuiltinModelConfig("tiny-mla"));
  ASSERT_TRUE(WriteHfCheckpoint(mla, hf, DType::kF32).ok());
  ASSERT_TRUE(SaveCheckpoint(mla, (file / "mla.safetensors").string()).ok());
  const Completion builtin = Generate("tiny-mla");
  testing_util::ExpectSameCompletion(builtin, Generate(hf), "DeepSeek HF directory");
  testing_util::ExpectSameCompletion(builtin, Generate(file / "mla.safetensors"), "kvferry file");
  // The stored rope rows are not the engine's: de-interleaving is not the identity here.
  auto raw = formats::SafetensorsModel::Open(hf);
  ASSERT_TRUE(raw.ok()) << raw.status();
  bool permuted = false;
  for (const formats::TensorView& t : raw->tensors()) {
    if (t.name != "model.layers.0.self_attn.kv_a_proj_with_mqa.weight") continue;
    const std::vector<float> engine_rows = ToF32(mla.layers[0].kv_a);
    permuted = std::memcmp(t.data, engine_rows.data(), engine_rows.size() * 4) != 0;
  }
  EXPECT_TRUE(permuted);

  ModelConfig variant = *BuiltinModelConfig("tiny-mla");
  variant.name = "mla-variant";
  variant.mla.q_lora_rank = 0;
  variant.rope_scaling.type = RopeScaling::Type::kYarn;
  variant.rope_scaling.factor = 4.0f;
  variant.rope_scaling.original_max_position = 64;
  variant.rope_scaling.mscale = variant.rope_scaling.mscale_all_dim = 0.707f;
  const fs::path hf2 = Scratch("mla_hf2");
  ASSERT_TRUE(WriteHfCheckpoint(*GenerateWeights(variant), hf2, DType::kBF16).ok());
  auto loaded = LoadModelWeights(hf2);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.mla, variant.mla);
  EXPECT_EQ(loaded->config.rope_scaling, variant.rope_scaling);
  EXPECT_EQ(loaded->config.head_dim, 24);
  EXPECT_EQ(loaded->config.num_kv_heads, 1);
  EXPECT_EQ(Generate(hf2).tokens.size(), 16u);
}

// Mixture-of-experts layers are refused naming first_k_dense_replace; GGUF is not written.
TEST(ModelLoaderTest, DeepseekMlaIsNotWrittenAsGguf) {
  const ModelWeights mla = *GenerateWeights(*BuiltinModelConfig("tiny-mla"));
  const fs::path dir = Scratch("mla_gguf");
  EXPECT_EQ(WriteGgufCheckpoint(mla, (dir / "m.gguf").string(), DType::kF32, nullptr).code(),
            StatusCode::kUnimplemented);
}

TEST(ModelLoaderTest, MistralSlidingWindowCapsTheContext) {
  const fs::path dir = WriteTiny("mistral");
  EditConfig(dir, [](auto& j) {
    j["architectures"] = {"MistralForCausalLM"};
    j["sliding_window"] = 1024;
  });
  auto w = LoadModelWeights(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->config.max_position, 1024);
}

// A Hugging Face directory whose safetensors holds `tensors` of the tiny llama variant, with
// the tensor `drop` left out, `reshape` given another shape, and `extra` added.
fs::path Tampered(const std::string& name, const std::string& drop, const std::string& reshape,
                  const std::string& extra) {
  const fs::path good = WriteTiny(name + "_src");
  auto st = formats::SafetensorsModel::Open(good);
  EXPECT_TRUE(st.ok());
  formats::SafetensorsWriter writer;
  for (const formats::TensorView& t : st->tensors()) {
    if (t.name == drop) continue;
    std::vector<int64_t> shape = t.shape;
    std::vector<std::byte> bytes(t.data, t.data + t.size_bytes);
    if (t.name == reshape) {
      shape = {t.elements() / 3, 3};
      bytes.resize(static_cast<size_t>(shape[0] * 3 * 4));
    }
    EXPECT_TRUE(writer.AddTensor(t.name, t.dtype, shape, bytes).ok());
  }
  if (!extra.empty()) {
    std::vector<std::byte> four(16);
    EXPECT_TRUE(writer.AddTensor(extra, DType::kF32, {4}, four).ok());
  }
  const fs::path dir = Scratch(name);
  EXPECT_TRUE(writer.WriteDirectory(dir, 1).ok());
  fs::copy_file(good / "config.json", dir / "config.json");
  return dir;
}

TEST(ModelLoaderTest, MissingWrongShapeAndUnexpectedTensorsAreNamed) {
  ExpectError(Tampered("missing", "model.layers.2.mlp.up_proj.weight", "", ""),
              StatusCode::kInvalidArgument, "model.layers.2.mlp.up_proj.weight");
  ExpectError(Tampered("shape", "", "model.layers.1.self_attn.k_proj.weight", ""),
              StatusCode::kInvalidArgument, "model.layers.1.self_attn.k_proj.weight");
  ExpectError(Tampered("extra", "", "", "model.layers.0.self_attn.q_proj.bias"),
              StatusCode::kInvalidArgument,
              "unexpected tensor 'model.layers.0.self_attn.q_proj.bias'");
}

// `good`'s tensors and metadata into `path`, with `edit` applied to each tensor first.
void RewriteGguf(const fs::path& good_path, const fs::path& path,
                 const std::function<void(const formats::TensorView&, DType*, std::vector<int64_t>*,
                                          std::vector<std::byte>*)>& edit) {
  auto good = formats::GgufFile::Open(good_path);
  ASSERT_TRUE(good.ok()) << good.status();
  formats::GgufWriter writer;
  for (const auto& [key, value] : good->metadata().entries()) {
    if (key == "general.alignment") continue;
    ASSERT_TRUE(writer.AddMetadata(key, value).ok()) << key;
  }
  for (const formats::TensorView& t : good->tensors()) {
    std::vector<std::byte> bytes(t.data, t.data + t.size_bytes);
    DType dtype = t.dtype;
    std::vector<int64_t> shape = t.shape;
    edit(t, &dtype, &shape, &bytes);
    ASSERT_TRUE(writer.AddTensor(t.name, dtype, shape, bytes).ok()) << t.name;
  }
  ASSERT_TRUE(writer.Write(path).ok());
}

TEST(ModelLoaderTest, QuantizedGgufTypesTheEngineDoesNotComputeAreRefusedByName) {
  const ModelWeights w = *GenerateWeights(*BuiltinModelConfig("tiny"));
  const fs::path dir = Scratch("quant");
  ASSERT_TRUE(WriteGgufCheckpoint(w, dir / "f32.gguf", DType::kF32, nullptr).ok());
  // One projection as Q3_K blocks (110 bytes per 256 values; zeros).
  RewriteGguf(dir / "f32.gguf", dir / "q3k.gguf",
              [](const auto& t, DType* dtype, auto* shape, auto* bytes) {
                if (t.name != "blk.1.ffn_up.weight") return;
                *shape = {t.shape[0], 256};
                *dtype = DType::kQ3_K;
                bytes->assign(static_cast<size_t>(t.shape[0] * 110), std::byte{0});
              });
  ExpectError(dir / "q3k.gguf", StatusCode::kInvalidArgument,
              "has dtype Q3_K; expected one of F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, "
              "Q4_K, Q5_K, Q6_K");
  // And the writer refuses to produce one; nor k-quants whose rows are not whole super-blocks.
  EXPECT_EQ(WriteGgufCheckpoint(w, dir / "x.gguf", DType::kQ3_K, nullptr).code(),
            StatusCode::kInvalidArgument);
  const Status k = WriteGgufCheckpoint(w, dir / "x.gguf", DType::kQ4_K, nullptr);
  EXPECT_NE(k.message().find("not whole Q4_K blocks of 256"), std::string::npos) << k;
}

TEST(ModelLoaderTest, Q8_0GgufWithABadScaleOrAQuantizedNormIsRefusedByName) {
  const ModelWeights w = *GenerateWeights(*BuiltinModelConfig("tiny"));
  const fs::path dir = Scratch("q8bad");
  ASSERT_TRUE(WriteGgufCheckpoint(w, dir / "q8.gguf", DType::kQ8_0, nullptr).ok());
  // Block 3 of one projection with an infinite scale.
  RewriteGguf(dir / "q8.gguf", dir / "inf.gguf", [](const auto& t, auto*, auto*, auto* bytes) {
    if (t.name != "blk.0.attn_k.weight") return;
    (*bytes)[3 * 34] = std::byte{0x00};
    (*bytes)[3 * 34 + 1] = std::byte{0x7c};
  });
  ExpectError(dir / "inf.gguf", StatusCode::kInvalidArgument,
              "'blk.0.attn_k.weight' in '" + (dir / "inf.gguf").string() +
                  "': Q8_0 block 3 has a NaN or infinite scale");
  // A norm as Q8_0.
  RewriteGguf(dir / "q8.gguf", dir / "norm.gguf",
              [](const auto& t, DType* dtype, auto*, auto* bytes) {
                if (t.name != "output_norm.weight") return;
                std::vector<float> v(static_cast<size_t>(t.elements()), 1.0f);
                bytes->resize(v.size() / 32 * 34);
                kernels::QuantizeRowQ8_0(v.data(), t.elements(),
                                         reinterpret_cast<kernels::BlockQ8_0*>(bytes->data()));
                *dtype = DType::kQ8_0;
              });
  ExpectError(dir / "norm.gguf", StatusCode::kInvalidArgument,
              "'output_norm.weight' in '" + (dir / "norm.gguf").string() +
                  "' is Q8_0; norms and biases must be F32, F16 or BF16");
}

// A GGUF in any computed quantized type stays in its blocks (no f32 copy at load) and computes the
// same tokens and logprobs, bit for bit, at TP 1, 2 and 4 and whatever the batch (Generate runs two
// prompts). The k-quants on KQuantTiny's layout.
TEST(ModelLoaderTest, QuantizedGgufComputesInItsBlocksAtEveryTpSize) {
  const ModelWeights w = *GenerateWeights(*BuiltinModelConfig("tiny"));
  const ModelWeights wk = *GenerateWeights(KQuantTiny());
  for (DType dtype : kernels::ComputedQuantTypes()) {
    SCOPED_TRACE(formats::DTypeName(dtype));
    const fs::path dir = Scratch("quant_tp");
    const bool k_quant = formats::DTypeBlockElements(dtype) == 256;
    ASSERT_TRUE(WriteGgufCheckpoint(k_quant ? wk : w, dir / "q.gguf", dtype, nullptr).ok());
    auto loaded = LoadModelWeights((dir / "q.gguf").string());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->layers[0].q.dtype, dtype);
    EXPECT_EQ(loaded->layers[1].down.dtype, dtype);
    EXPECT_EQ(loaded->embed.dtype, dtype);
    const Completion tp1 = Generate((dir / "q.gguf").string());
    ASSERT_FALSE(tp1.tokens.empty());
    for (int32_t tp : {2, 4}) {
      const Completion other = Generate((dir / "q.gguf").string(), tp);
      EXPECT_EQ(other.tokens, tp1.tokens) << "TP " << tp;
      EXPECT_EQ(0, std::memcmp(other.logprobs.data(), tp1.logprobs.data(),
                               tp1.logprobs.size() * sizeof(float)))
          << "TP " << tp;
    }
  }
}

// A quantized file cut short (a download that stopped): refused at open, naming the tensor whose
// bytes run past the end of the data, never read.
TEST(ModelLoaderTest, TruncatedQuantizedGgufIsDataLossNamingTheTensor) {
  const fs::path dir = Scratch("q4k_truncated");
  ASSERT_TRUE(
      WriteGgufCheckpoint(*GenerateWeights(KQuantTiny()), dir / "q.gguf", DType::kQ4_K, nullptr)
          .ok());
  fs::resize_file(dir / "q.gguf", fs::file_size(dir / "q.gguf") - 100);
  ExpectError(dir / "q.gguf", StatusCode::kDataLoss, "run past the end of the data section");
}

// Leaves of 16 columns (4 heads of 16, fixed whatever the TP size) would cut o_proj's blocks:
// refused when the engine is created, naming the layer and the tensor.
TEST(ModelLoaderTest, Q8_0WhoseRowParallelLeavesCutBlocksIsRefused) {
  ModelConfig c = *BuiltinModelConfig("tiny");
  c.hidden_dim = 64;
  c.head_dim = 16;
  c.ffn_dim = 256;
  const fs::path dir = Scratch("q8leaves");
  ASSERT_TRUE(
      WriteGgufCheckpoint(*GenerateWeights(c), dir / "q8.gguf", DType::kQ8_0, nullptr).ok());
  EngineConfig config;
  config.model = (dir / "q8.gguf").string();
  config.tokenizer = "byte-level";
  auto engine = Engine::Create(config);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("layer 0's attention output projection (o_proj / "
                                           "attn_output) is Q8_0, and its 64 input columns "
                                           "reduce in 4 fixed groups of 16"),
            std::string_view::npos)
      << engine.status();
}

TEST(ModelLoaderTest, TruncatedAndMissingFilesAreErrors) {
  const fs::path dir = WriteTiny("trunc");
  fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") / 2);
  ExpectError(dir, StatusCode::kDataLoss, "model.safetensors");
  ExpectError(dir / "nothing-here", StatusCode::kNotFound, "nothing-here");
  fs::remove(dir / "config.json");
  ExpectError(dir, StatusCode::kNotFound, "config.json");
}

}  // namespace
}  // namespace kvferry::engine
