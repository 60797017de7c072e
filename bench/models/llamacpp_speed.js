// llama.cpp's prefill and decode speed on a GGUF file, for bench/models/llamacpp_compare.sh:
// node-llama-cpp 3.21.1 through its prebuilt linux-x64 CPU binary (tests/refs/package.json; no
// GPU probing, never a build from source), batch 1, THREADS threads.
//
//   usage: node llamacpp_speed.js MODEL.gguf PROMPT_LEN DECODE_TOKENS THREADS [SEQUENCES]
//   prints {"prefill_tok_s": x, "decode_tok_s": y} (JSON only) on stdout
//
// Prefill: one evaluation of PROMPT_LEN token ids (the same ids `kvferry bench engine` uses),
// batch size PROMPT_LEN, timed; the best of two. Decode: DECODE_TOKENS greedy tokens after it,
// one evaluation each, timed: so decode runs at a context of PROMPT_LEN tokens. With SEQUENCES
// > 1 (batched decode, llama.cpp's parallel sequences in one context): each sequence is given
// the prompt (untimed), then all decode DECODE_TOKENS tokens at once, which node-llama-cpp
// batches into one evaluation per step; decode_tok_s counts every sequence's tokens and
// prefill_tok_s is 0. The context computes as kvferry does (f32 KV cache, no flash attention),
// as in tests/refs/llama_cpp_greedy.js.
"use strict";
const path = require("path");

function promptIds(len) {
  // kvferry's bench engine prompt: 256, then 32 + (i * 7) % 95.
  const ids = [256];
  for (let i = 1; i < len; ++i) ids.push(32 + ((i * 7) % 95));
  return ids;
}

async function main() {
  const [modelPath, promptLenArg, decodeArg, threadsArg, seqArg] = process.argv.slice(2);
  if (!modelPath) {
    throw new Error("usage: node llamacpp_speed.js MODEL.gguf PROMPT_LEN DECODE THREADS [SEQUENCES]");
  }
  const promptLen = Number(promptLenArg), decodeTokens = Number(decodeArg);
  const sequences = Number(seqArg || 1);
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
    contextSize: promptLen + decodeTokens + 16, // per sequence
    batchSize: Math.max(promptLen, sequences),
    sequences,
    threads: Number(threadsArg),
    flashAttention: false,
    experimentalKvCacheKeyType: "F32",
    experimentalKvCacheValueType: "F32",
  });
  const prompt = promptIds(promptLen);
  if (sequences > 1) {
    process.stdout.write(JSON.stringify(await batchedDecode(context, prompt, sequences, decodeTokens)) + "\n");
    await context.dispose();
    await model.dispose();
    await llama.dispose();
    return;
  }
  const sequence = context.getSequence();
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

// SEQUENCES sequences, each given the prompt, then all decoding at once (one batch per step).
async function batchedDecode(context, prompt, sequences, decodeTokens) {
  const seqs = [];
  for (let i = 0; i < sequences; ++i) seqs.push(context.getSequence());
  for (const s of seqs) await s.evaluateWithoutGeneratingNewTokens(prompt);
  const t0 = process.hrtime.bigint();
  const counts = await Promise.all(seqs.map(async (s) => {
    let n = 0;
    for await (const token of s.evaluate([prompt[prompt.length - 1]], { temperature: 0 })) {
      void token;
      if (++n >= decodeTokens) break;
    }
    return n;
  }));
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  return { prefill_tok_s: 0, decode_tok_s: counts.reduce((a, b) => a + b, 0) / seconds };
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
