// Example: the engine as a library. Greedy completion of a prompt on the built-in `tiny` model,
// first with the defaults, then with the seed's geometry (block 128 on flash, kernel 64): the
// determinism contract makes both texts identical.
#include <cstdio>
#include <string>

#include "kvferry/engine/engine.h"

using namespace kvferry;

static StatusOr<std::string> Complete(engine::EngineConfig config, const std::string& prompt) {
  KVF_ASSIGN_OR_RETURN(auto eng, engine::Engine::Create(config));
  engine::SamplingParams params;
  params.max_tokens = 16;
  KVF_ASSIGN_OR_RETURN(std::vector<int32_t> ids, eng->tokenizer().Encode(prompt, true));
  KVF_RETURN_IF_ERROR(eng->AddRequest("r1", std::move(ids), params));
  std::vector<int32_t> tokens;
  while (eng->HasWork()) {
    for (const auto& out : eng->Step())
      tokens.insert(tokens.end(), out.new_token_ids.begin(), out.new_token_ids.end());
  }
  return eng->tokenizer().Decode(tokens, /*skip_special_tokens=*/true);
}

int main() {
  const std::string prompt = "The ferry crosses the river";
  engine::EngineConfig defaults;
  engine::EngineConfig seed_geometry;
  seed_geometry.block_size = 128;
  seed_geometry.attention_backend = "flash";
  auto a = Complete(defaults, prompt);
  auto b = Complete(seed_geometry, prompt);
  if (!a.ok() || !b.ok()) {
    std::fprintf(stderr, "error: %s\n", (!a.ok() ? a.status() : b.status()).ToString().c_str());
    return 1;
  }
  std::printf("defaults:        %s\nblock 128/flash: %s\nidentical: %s\n", a->c_str(), b->c_str(),
              *a == *b ? "yes" : "NO");
  return *a == *b ? 0 : 1;
}
