// llama.cpp's prefill and decode speed on a GGUF file, for bench/models/llamacpp_compare.sh:
// node-llama-cpp 3.21.1 through its prebuilt linux-x64 CPU binary (tests/refs/package.json; no
// GPU probing, never a build from source), batch 1, THREADS threads.
//
//   usage: node llamacpp_speed.js MODEL.gguf PROMPT_LEN DECODE_TOKENS THREADS
//   prints {"prefill_tok_s": x, "decode_tok_s": y} (JSON only) on stdout
//
// Prefill: one evaluation of PROMPT_LEN token ids (the same ids `kvferry bench engine` uses),
// batch size PROMPT_LEN, timed; the best of two. Decode: DECODE_TOKENS greedy tokens after it,
// one evaluation each, timed. The context computes as kvferry does (f32 KV cache, no flash
// attention), as in tests/refs/llama_cpp_greedy.js.
"use strict";
const path = require("path");

function promptIds(len) {
  // kvferry's bench engine prompt: 256, then 32 + (i * 7) % 95.
  const ids = [256];
  for (let i = 1; i < len; ++i) ids.push(32 + ((i * 7) % 95));
  return ids;
}

async function main() {
  const [modelPath, promptLenArg, decodeArg, threadsArg] = process.argv.slice(2);
  if (!modelPath) throw new Error("usage: node llamacpp_speed.js MODEL.gguf PROMPT_LEN DECODE THREADS");
  const promptLen = Number(promptLenArg), decodeTokens = Number(decodeArg);
  const refs = path.join(__dirname, "../../tests/refs/node_modules/node-llama-cpp");
  const { getLlama } = await import(path.join(refs, "dist/index.js"));
  const llama = await getLlama({
    gpu: false,
    build: "never",
    skipDownload: true,
    usePrebuiltBinaries: true,
    progressLogs: false,
    logLevel: "error",
  });
  const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
  const context = await model.createContext({
    contextSize: promptLen + decodeTokens + 16,
    batchSize: promptLen,
    sequences: 1,
    threads: Number(threadsArg),
    flashAttention: false,
    experimentalKvCacheKeyType: "F32",
    experimentalKvCacheValueType: "F32",
  });
  const sequence = context.getSequence();
  const prompt = promptIds(promptLen);
  let prefill = Infinity;
  for (let rep = 0; rep < 2; ++rep) {
    await sequence.clearHistory();
    const t0 = process.hrtime.bigint();
    await sequence.evaluateWithoutGeneratingNewTokens(prompt);
    prefill = Math.min(prefill, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  // The prompt's last token is evaluated again to start generation; every yielded token is one
  // decode step of batch 1.
  let n = 0;
  const t0 = process.hrtime.bigint();
  for await (const token of sequence.evaluate([prompt[prompt.length - 1]], { temperature: 0 })) {
    void token;
    if (++n >= decodeTokens) break;
  }
  const decode = Number(process.hrtime.bigint() - t0) / 1e9;
  process.stdout.write(
    JSON.stringify({ prefill_tok_s: promptLen / prefill, decode_tok_s: n / decode }) + "\n",
  );
  await context.dispose();
  await model.dispose();
  await llama.dispose();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
