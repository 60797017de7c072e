// `kvferry generate`: runs the engine on one prompt and prints the completion.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvferry/engine/engine.h"
#include "server/chat_template.h"
#include "tools/command_registry.h"

namespace {

struct GenerateOptions {
  std::string model = "tiny";
  std::string tokenizer;
  std::string chat_template;
  std::string prompt;
  std::vector<int32_t> prompt_token_ids;
  bool chat = false;
  bool json = false;
  int max_tokens = 32;
  int block_size = 16;
  std::string attention_backend = "paged";
  std::string kv_cache_layout = "NHD";
  std::string kv_cache_dtype = "f32";
  int num_kv_blocks = 0;
  int max_model_len = 0;
  int max_num_batched_tokens = 256;
  int threads = 2;
  int tensor_parallel_size = 1;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  long long seed = -1;
  bool ignore_eos = false;
  bool no_bos = false;
  bool verbose = false;
};

// The prompt's ids: given as ids, or the text (as a user message through the chat template
// with --chat; with the tokenizer's special tokens unless --no-bos).
kvferry::StatusOr<std::vector<int32_t>> PromptIds(const GenerateOptions& o,
                                                  const kvferry::tokenizer::Tokenizer& tok) {
  using namespace kvferry;
  if (!o.prompt_token_ids.empty()) return o.prompt_token_ids;
  if (!o.chat) return tok.Encode(o.prompt, !o.no_bos);
  KVF_ASSIGN_OR_RETURN(server::ChatTemplate t, server::ChatTemplate::Create(o.chat_template, tok));
  server::OpenAiRequest request;
  request.kind = server::ApiKind::kChat;
  request.chat_messages = {{{"role", "user"}, {"content", o.prompt}}};
  KVF_ASSIGN_OR_RETURN(std::string text, t.Render(request));
  return tok.Encode(text, t.AddSpecialTokens(request) && !o.no_bos);
}

// The engine the flags describe; false (after printing why) on a bad --kv-cache-* value.
bool EngineConfigFrom(const GenerateOptions& o, kvferry::engine::EngineConfig* config) {
  using namespace kvferry;
  config->model = o.model;
  config->tokenizer = o.tokenizer;
  config->block_size = o.block_size;
  config->attention_backend = o.attention_backend;
  auto layout = kv::ParseLayout(o.kv_cache_layout);
  if (!layout.ok()) {
    std::fprintf(stderr, "error: --kv-cache-layout: %s\n", layout.status().ToString().c_str());
    return false;
  }
  config->kv_cache_layout = *layout;
  auto dtype = kv::ParseDType(o.kv_cache_dtype);
  if (!dtype.ok()) {
    std::fprintf(stderr, "error: --kv-cache-dtype: %s\n", dtype.status().ToString().c_str());
    return false;
  }
  config->kv_cache_dtype = *dtype;
  config->num_kv_blocks = o.num_kv_blocks;
  config->max_model_len = o.max_model_len;
  config->max_num_batched_tokens = o.max_num_batched_tokens;
  config->num_threads = o.threads;
  config->tensor_parallel_size = o.tensor_parallel_size;
  return true;
}

kvferry::engine::SamplingParams SamplingFrom(const GenerateOptions& o) {
  kvferry::engine::SamplingParams params;
  params.max_tokens = o.max_tokens;
  params.temperature = o.temperature;
  params.top_k = o.top_k;
  params.top_p = o.top_p;
  if (o.seed >= 0) params.seed = static_cast<uint64_t>(o.seed);
  params.ignore_eos = o.ignore_eos;
  return params;
}

// What the one request produced.
struct Completion {
  std::vector<int32_t> output;
  std::vector<float> logprobs;
  kvferry::engine::FinishReason reason = kvferry::engine::FinishReason::kNone;
  int32_t generated = 0;
};

// Steps `e` until it has no work, gathering the request's tokens (each on stderr with
// --verbose); false (after printing the error) when the request finishes with an error.
bool RunToCompletion(kvferry::engine::Engine& e, bool verbose, Completion* c) {
  using namespace kvferry;
  while (e.HasWork()) {
    for (const engine::RequestOutput& out : e.Step()) {
      for (size_t i = 0; i < out.new_token_ids.size(); ++i) {
        c->output.push_back(out.new_token_ids[i]);
        c->logprobs.push_back(out.new_logprobs[i]);
        if (verbose) {
          std::fprintf(stderr, "token %d id %d logprob %.6f\n", c->generated, out.new_token_ids[i],
                       static_cast<double>(out.new_logprobs[i]));
        }
        ++c->generated;
      }
      if (out.finished) {
        c->reason = out.finish_reason;
        if (c->reason == engine::FinishReason::kError) {
          std::fprintf(stderr, "error: %s\n", out.error.ToString().c_str());
          return false;
        }
      }
    }
  }
  return true;
}

// The completion on stdout: one JSON object with --json, else its text.
void PrintCompletion(const GenerateOptions& o, const kvferry::engine::Engine& e,
                     const std::vector<int32_t>& prompt, const Completion& c) {
  using namespace kvferry;
  if (o.json) {
    const nlohmann::json j = {
        {"prompt_token_ids", prompt},
        {"output_token_ids", c.output},
        {"output_logprobs", c.logprobs},
        {"text", e.tokenizer().Decode(c.output, /*skip_special_tokens=*/true)},
        {"finish_reason", engine::FinishReasonName(c.reason)}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  const std::string text = e.tokenizer().DecodeBytes(c.output, /*skip_special_tokens=*/true);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  if (o.verbose) {
    std::fprintf(stderr, "finish_reason %s, %d tokens, kernel block size %d\n",
                 std::string(engine::FinishReasonName(c.reason)).c_str(), c.generated,
                 e.block_size_kernel());
  }
}

int RunGenerate(const GenerateOptions& o) {
  using namespace kvferry;
  engine::EngineConfig config;
  if (!EngineConfigFrom(o, &config)) return 2;
  auto created = engine::Engine::Create(config);
  if (!created.ok()) {
    std::fprintf(stderr, "error: %s\n", created.status().ToString().c_str());
    return 1;
  }
  engine::Engine& e = **created;
  StatusOr<std::vector<int32_t>> prompt = PromptIds(o, e.tokenizer());
  if (!prompt.ok()) {
    std::fprintf(stderr, "error: %s\n", prompt.status().ToString().c_str());
    return 1;
  }
  const Status added = e.AddRequest("generate", *prompt, SamplingFrom(o));
  if (!added.ok()) {
    std::fprintf(stderr, "error: %s\n", added.ToString().c_str());
    return 1;
  }
  Completion completion;
  if (!RunToCompletion(e, o.verbose, &completion)) return 1;
  PrintCompletion(o, e, *prompt, completion);
  return 0;
}

void AddGenerate(CLI::App& app) {
  auto opts = std::make_shared<GenerateOptions>();
  auto* sub = app.add_subcommand("generate", "Generate a completion for one prompt");
  sub->add_option("--model", opts->model,
                  "Built-in model (tiny, small, tiny-odd, tiny-kv4, tiny-mla, tiny-moe, "
                  "tiny-mla-moe), a Hugging Face "
                  "model directory or a "
                  ".gguf file (docs/models.md)")
      ->capture_default_str();
  sub->add_option("--tokenizer", opts->tokenizer,
                  "Tokenizer: a directory with tokenizer.json, or byte-level (default: the "
                  "model's own)");
  auto* text = sub->add_option("--prompt", opts->prompt,
                               "Prompt text (encoded with the model's tokenizer and its special "
                               "tokens, e.g. <bos>)");
  auto* ids = sub->add_option("--prompt-token-ids", opts->prompt_token_ids,
                              "The prompt as token ids instead of text")
                  ->delimiter(',');
  text->excludes(ids);
  sub->add_flag("--chat", opts->chat,
                "Send --prompt as a user message through the model's chat template");
  sub->add_option("--chat-template", opts->chat_template,
                  "With --chat: a Jinja file or template text (default: the model's own)");
  sub->add_flag("--json", opts->json,
                "Print {prompt_token_ids, output_token_ids, output_logprobs, text, "
                "finish_reason} as JSON");
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
  sub->add_option("--threads", opts->threads,
                  "Kernel threads per tensor-parallel rank (results do not depend on it)")
      ->capture_default_str();
  sub->add_option("--tensor-parallel-size", opts->tensor_parallel_size,
                  "Tensor-parallel ranks (-tp, as vLLM); results do not depend on it "
                  "(docs/engine.md)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
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
  sub->callback([opts, text, ids] {
    if (text->count() == 0 && ids->count() == 0) {
      throw CLI::RequiredError("--prompt or --prompt-token-ids");
    }
    throw CLI::RuntimeError(RunGenerate(*opts));
  });
}
KVF_REGISTER_COMMAND(AddGenerate);

}  // namespace
