#!/usr/bin/env bash
# `kvferry quantize` as a user runs it (label integration): an F32 GGUF file and the same model's
# Hugging Face directory, quantized to Q8_0 (and the directory to Q4_0, and a model whose rows
# are whole 256-value super-blocks to Q4_K_M), compute exactly what `synth-model --dtype q8_0`
# (q4_0, q4_k_m) writes for that model (greedy tokens and logprobs, bit for bit through
# `generate --json`), at a quarter of the F32 size plus scales; the Q4_K_M file mixes the types
# llama-quantize would (Q4_K, Q6_K for some attn_v/ffn_down and the tied output); quantizing a
# quantized file, or to a type kvferry does not write, is refused with a message naming why.
# (llama.cpp runs synth-model's files in tests/refs/llama_cpp_test.cc.)
#
# usage: tests/cli/quantize_test.sh path/to/kvferry path/to/tokenizer-dir
set -euo pipefail
KVF=$(realpath "$1")
TOK=$(realpath "$2")
WORK=$(mktemp -d -t kvferry-quantize-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

shape=(--arch qwen3 --tokenizer "$TOK" --hidden 128 --layers 2 --heads 4 --kv-heads 2
  --head-dim 64 --ffn 384 --tie-embeddings --seed 3)
"$KVF" synth-model "${shape[@]}" --dtype f32 --out hf --gguf f32.gguf 2>/dev/null
"$KVF" synth-model "${shape[@]}" --dtype q8_0 --gguf synth-q8.gguf 2>/dev/null
"$KVF" synth-model "${shape[@]}" --dtype q4_0 --gguf synth-q4.gguf 2>/dev/null
"$KVF" quantize f32.gguf from-gguf.gguf --type q8_0
"$KVF" quantize hf from-hf.gguf --type q8_0
"$KVF" quantize hf from-hf-q4.gguf --type q4_0
kshape=(--arch qwen3 --tokenizer "$TOK" --hidden 256 --layers 2 --heads 8 --kv-heads 2
  --head-dim 128 --ffn 1024 --tie-embeddings --seed 3)
"$KVF" synth-model "${kshape[@]}" --dtype f32 --out hfk 2>/dev/null
"$KVF" synth-model "${kshape[@]}" --dtype q4_k_m --gguf synth-q4km.gguf 2>/dev/null
"$KVF" quantize hfk from-hf-q4km.gguf --type q4_k_m 2>q4km.txt
cat q4km.txt
# A mixture of experts (Mixtral: 8 experts, 2 per token) from its Hugging Face directory.
mshape=(--arch mixtral --tokenizer "$TOK" --hidden 256 --layers 2 --heads 8 --kv-heads 2
  --head-dim 128 --ffn 256 --experts 8 --experts-per-token 2 --seed 3)
"$KVF" synth-model "${mshape[@]}" --dtype f32 --out hfm 2>/dev/null
"$KVF" synth-model "${mshape[@]}" --dtype q4_k_m --gguf synth-moe-q4km.gguf 2>/dev/null
"$KVF" quantize hfm from-hf-moe-q4km.gguf --type q4_k_m 2>moe.txt
cat moe.txt

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

generate() {
  "$KVF" generate --model "$1" --prompt "The capital of France is" --max-tokens 12 --json \
    2>/dev/null
}
want=$(generate synth-q8.gguf)
[ -n "$want" ] || fail "no output from synth-model's Q8_0 file"
for m in from-gguf.gguf from-hf.gguf; do
  if [ "$(generate "$m")" = "$want" ]; then echo "ok: $m computes as synth-model's Q8_0"; else
    fail "$m: $(generate "$m") != $want"
  fi
done
[ "$(generate f32.gguf)" != "$want" ] || fail "the Q8_0 output equals the F32 one: not quantized?"
want4=$(generate synth-q4.gguf)
if [ "$(generate from-hf-q4.gguf)" = "$want4" ]; then echo "ok: q4_0 computes as synth-model's"; else
  fail "from-hf-q4.gguf: $(generate from-hf-q4.gguf) != $want4"
fi
[ "$want4" != "$want" ] || fail "the Q4_0 output equals the Q8_0 one"
wantk=$(generate synth-q4km.gguf)
if [ -n "$wantk" ] && [ "$(generate from-hf-q4km.gguf)" = "$wantk" ]; then
  echo "ok: q4_k_m computes as synth-model's"
else
  fail "from-hf-q4km.gguf: $(generate from-hf-q4km.gguf) != $wantk"
fi
# 2 layers: use_more_bits gives layer 1's attn_v and ffn_down Q6_K, and the tied embedding is the
# output (Q6_K): 3 of the 15 matrices; the norms stay F32.
grep -q "(Q4_K 12, F32 9, Q6_K 3)" q4km.txt || fail "q4_k_m's types: $(cat q4km.txt)"
wantm=$(generate synth-moe-q4km.gguf)
if [ -n "$wantm" ] && [ "$(generate from-hf-moe-q4km.gguf)" = "$wantm" ]; then
  echo "ok: a mixture of experts' q4_k_m computes as synth-model's"
else
  fail "from-hf-moe-q4km.gguf: $(generate from-hf-moe-q4km.gguf) != $wantm"
fi
# llama-quantize's 8-expert rules: attn_k and attn_v Q8_0, attn_output Q5_K; layer 1's
# ffn_down_exps and the output Q6_K; the routers (ffn_gate_inp) stay F32 beside the norms.
grep -q "(Q4_K 8, F32 7, Q8_0 4, Q5_K 2, Q6_K 2)" moe.txt || fail "MoE q4_k_m's types: $(cat moe.txt)"

f32=$(stat -c %s f32.gguf)
q8=$(stat -c %s from-gguf.gguf)
# Matrices take 34 bytes per 32 values where F32 took 128; the tokenizer is the same in both.
if [ $((q8 * 2)) -lt "$f32" ]; then echo "ok: $q8 bytes, F32 $f32"; else fail "$q8 bytes, F32 $f32"; fi

# expect_refusal NEEDLE ARGS...: kvferry quantize ARGS fails, its message naming NEEDLE.
expect_refusal() {
  local needle=$1 rc=0
  shift
  "$KVF" quantize "$@" >out.txt 2>&1 || rc=$?
  if [ "$rc" -ne 0 ] && grep -q -- "$needle" out.txt; then echo "ok: refused: $needle"; else
    fail "quantize $* (exit $rc): $(cat out.txt)"
  fi
}
expect_refusal "already quantized (Q8_0: model.embed_tokens.weight)" from-gguf.gguf again.gguf --type q8_0
# (q4_0's tied embedding is its output: Q6_K, or Q8_0 where its 128-value rows are not whole
# super-blocks, as llama-quantize assigns it.)
expect_refusal "already quantized (Q8_0: model.embed_tokens.weight)" from-hf-q4.gguf again.gguf --type q8_0
expect_refusal "already quantized (Q6_K: model.embed_tokens.weight)" from-hf-q4km.gguf again.gguf --type q4_k_m
expect_refusal "--type 'q4_k'" f32.gguf x.gguf --type q4_k
expect_refusal "nothing-here" nothing-here x.gguf --type q8_0
[ ! -e again.gguf ] && [ ! -e x.gguf ] || fail "a refused run left an output file"

[ "$failures" -eq 0 ] || exit 1
echo "quantize: all checks passed"
