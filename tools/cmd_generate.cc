// `kvferry generate`: runs the engine on one prompt and prints the completion.
#include <cstdio>
#include <memory>
#include <string>

#include "kvferry/engine/engine.h"
#include "tools/command_registry.h"

namespace {

struct GenerateOptions {
  std::string model = "tiny";
  std::string prompt;
  int max_tokens = 32;
  int block_size = 16;
  std::string attention_backend = "paged";
  std::string kv_cache_layout = "NHD";
  std::string kv_cache_dtype = "f32";
  int num_kv_blocks = 0;
  int max_model_len = 0;
  int max_num_batched_tokens = 256;
  int threads = 2;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  long long seed = -1;
  bool ignore_eos = false;
  bool no_bos = false;
  bool verbose = false;
};

int RunGenerate(const GenerateOptions& o) {
  using namespace kvferry;
  engine::EngineConfig config;
  config.model = o.model;
  config.block_size = o.block_size;
  config.attention_backend = o.attention_backend;
  auto layout = kv::ParseLayout(o.kv_cache_layout);
  if (!layout.ok()) {
    std::fprintf(stderr, "error: --kv-cache-layout: %s\n", layout.status().ToString().c_str());
    return 2;
  }
  config.kv_cache_layout = *layout;
  auto dtype = kv::ParseDType(o.kv_cache_dtype);
  if (!dtype.ok()) {
    std::fprintf(stderr, "error: --kv-cache-dtype: %s\n", dtype.status().ToString().c_str());
    return 2;
  }
  config.kv_cache_dtype = *dtype;
  config.num_kv_blocks = o.num_kv_blocks;
  config.max_model_len = o.max_model_len;
  config.max_num_batched_tokens = o.max_num_batched_tokens;
  config.num_threads = o.threads;
  auto created = engine::Engine::Create(config);
  if (!created.ok()) {
    std::fprintf(stderr, "error: %s\n", created.status().ToString().c_str());
    return 1;
  }
  engine::Engine& e = **created;
  engine::SamplingParams params;
  params.max_tokens = o.max_tokens;
  params.temperature = o.temperature;
  params.top_k = o.top_k;
  params.top_p = o.top_p;
  if (o.seed >= 0) params.seed = static_cast<uint64_t>(o.seed);
  params.ignore_eos = o.ignore_eos;
  StatusOr<std::vector<int32_t>> prompt = e.tokenizer().Encode(o.prompt, !o.no_bos);
  if (!prompt.ok()) {
    std::fprintf(stderr, "error: %s\n", prompt.status().ToString().c_str());
    return 1;
  }
  const Status added = e.AddRequest("generate", *prompt, params);
  if (!added.ok()) {
    std::fprintf(stderr, "error: %s\n", added.ToString().c_str());
    return 1;
  }
  std::vector<int32_t> output;
  engine::FinishReason reason = engine::FinishReason::kNone;
  int32_t generated = 0;
  while (e.HasWork()) {
    for (const engine::RequestOutput& out : e.Step()) {
      for (size_t i = 0; i < out.new_token_ids.size(); ++i) {
        output.push_back(out.new_token_ids[i]);
        if (o.verbose) {
          std::fprintf(stderr, "token %d id %d logprob %.6f\n", generated, out.new_token_ids[i],
                       static_cast<double>(out.new_logprobs[i]));
        }
        ++generated;
      }
      if (out.finished) {
        reason = out.finish_reason;
        if (reason == engine::FinishReason::kError) {
          std::fprintf(stderr, "error: %s\n", out.error.ToString().c_str());
          return 1;
        }
      }
    }
  }
  const std::string text = e.tokenizer().DecodeBytes(output, /*skip_special_tokens=*/true);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  if (o.verbose) {
    std::fprintf(stderr, "finish_reason %s, %d tokens, kernel block size %d\n",
                 std::string(engine::FinishReasonName(reason)).c_str(), generated,
                 e.block_size_kernel());
  }
  return 0;
}

void AddGenerate(CLI::App& app) {
  auto opts = std::make_shared<GenerateOptions>();
  auto* sub = app.add_subcommand("generate", "Generate a completion for one prompt");
  sub->add_option("--model", opts->model,
                  "Built-in model (tiny, small, tiny-odd) or a checkpoint path (docs/engine.md)")
      ->capture_default_str();
  sub->add_option("--prompt", opts->prompt, "Prompt text (byte-level tokens, <bos> prepended)")
      ->required();
  sub->add_option("--max-tokens", opts->max_tokens, "Tokens to generate at most")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--block-size", opts->block_size,
                  "Logical KV block size in tokens (the kernel block size is chosen by the "
                  "attention backend)")
      ->capture_default_str();
  sub->add_option("--attention-backend", opts->attention_backend,
                  "flash (kernel blocks 16/32/64) or paged (any multiple of 16)")
      ->capture_default_str();
  sub->add_option("--kv-cache-layout", opts->kv_cache_layout, "NHD or HND")->capture_default_str();
  sub->add_option("--kv-cache-dtype", opts->kv_cache_dtype, "KV storage dtype: f32, f16, bf16")
      ->capture_default_str();
  sub->add_option("--num-kv-blocks", opts->num_kv_blocks,
                  "Logical KV blocks to allocate (0: from a 64 MiB budget)")
      ->capture_default_str();
  sub->add_option("--max-model-len", opts->max_model_len,
                  "Longest sequence (prompt + output); 0: the model's maximum")
      ->capture_default_str();
  sub->add_option("--max-num-batched-tokens", opts->max_num_batched_tokens,
                  "Token budget of one engine step (chunked prefill above it)")
      ->capture_default_str();
  sub->add_option("--threads", opts->threads, "Kernel threads (results do not depend on it)")
      ->capture_default_str();
  sub->add_option("--temperature", opts->temperature, "0: greedy; > 0: sample")
      ->capture_default_str();
  sub->add_option("--top-k", opts->top_k, "Keep the k most likely tokens (0: off)")
      ->capture_default_str();
  sub->add_option("--top-p", opts->top_p, "Nucleus mass in (0, 1]")->capture_default_str();
  sub->add_option("--seed", opts->seed, "Sampling seed (-1: engine default)")
      ->capture_default_str();
  sub->add_flag("--ignore-eos", opts->ignore_eos, "Do not stop at the end-of-sequence token");
  sub->add_flag("--no-bos", opts->no_bos, "Do not prepend <bos> to the prompt");
  sub->add_flag("-v,--verbose", opts->verbose, "Print token ids and logprobs to stderr");
  sub->callback([opts] { throw CLI::RuntimeError(RunGenerate(*opts)); });
}
KVF_REGISTER_COMMAND(AddGenerate);

}  // namespace
