// Greedy generation with llama.cpp, the reference forward pass for kvferry's engine
// (tests/refs/llama_cpp_test.cc): loads a GGUF file with node-llama-cpp 3.21.1 through its
// prebuilt linux-x64 CPU binary (no GPU probing, never a build from source) and, for each
// request, evaluates the given prompt token ids and takes the most likely token max_tokens
// times. It also tokenizes each request's text with llama.cpp's own tokenizer.
//
//   usage: node llama_cpp_greedy.js REQUESTS.json OUT.json
//
//   REQUESTS.json  {"model": "m.gguf", "max_tokens": 16,
//                   "requests": [{"text": "...", "prompt_token_ids": [...]}, ...]}
//   OUT.json       {"add_bos": bool, "bos_token_id": id | null,
//                   "results": [{"text_token_ids": [...],     // llama.cpp's tokens of text
//                                "output_token_ids": [...],   // greedy, eos not stopping it
//                                "top2": [[p1, p2], ...]}]}   // the two highest probabilities
//
// The context computes as kvferry does: f32 KV cache (llama.cpp's default is f16), no flash
// attention (its CPU path rounds the queries to f16), no repeat penalty, temperature 0.
"use strict";
const fs = require("fs");

async function main() {
  const [input, output] = process.argv.slice(2);
  if (!input || !output) throw new Error("usage: node llama_cpp_greedy.js REQUESTS.json OUT.json");
  const spec = JSON.parse(fs.readFileSync(input, "utf8"));
  const { getLlama } = await import("node-llama-cpp");
  const llama = await getLlama({
    gpu: false,
    build: "never",
    skipDownload: true,
    usePrebuiltBinaries: true,
    progressLogs: false,
    logLevel: "error",
  });
  const model = await llama.loadModel({ modelPath: spec.model, gpuLayers: 0 });
  const context = await model.createContext({
    contextSize: 1024,
    batchSize: 1024,
    sequences: 1,
    threads: 2,
    flashAttention: false,
    experimentalKvCacheKeyType: "F32",
    experimentalKvCacheValueType: "F32",
  });
  const sequence = context.getSequence();
  const results = [];
  for (const request of spec.requests) {
    await sequence.clearHistory();
    const generated = [];
    const top2 = [];
    const tokens = sequence.evaluateWithMetadata(
      request.prompt_token_ids,
      { probabilities: true },
      { temperature: 0, yieldEogToken: true },
    );
    for await (const { token, probabilities } of tokens) {
      const best = probabilities.values();
      top2.push([best.next().value, best.next().value]);
      generated.push(token);
      if (generated.length >= spec.max_tokens) break;
    }
    results.push({
      text_token_ids: model.tokenize(request.text, /*specialTokens=*/ true),
      output_token_ids: generated,
      top2,
    });
  }
  const out = {
    add_bos: model.tokens.shouldPrependBosToken,
    bos_token_id: model.tokens.bos ?? null,
    results,
  };
  fs.writeFileSync(output, JSON.stringify(out));
  await context.dispose();
  await model.dispose();
  await llama.dispose();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
