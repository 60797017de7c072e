#!/usr/bin/env bash
# Integration test of `kvferry generate` (label integration): the same text with the defaults
# and with --block-size 128 --attention-backend flash (kernel blocks of 64, R = 2), and with the
# other layouts/thread counts and tensor-parallel sizes; --help documents every flag; bad input is a clear error.
set -euo pipefail
KVF="$1"
PROMPT="The KV cache moves from prefill to decode"

base=$("$KVF" generate --prompt "$PROMPT" --max-tokens 24)
flash=$("$KVF" generate --prompt "$PROMPT" --max-tokens 24 --block-size 128 --attention-backend flash)
hnd=$("$KVF" generate --prompt "$PROMPT" --max-tokens 24 --kv-cache-layout HND --threads 1 --block-size 32)
if [[ -z "$base" ]]; then echo "FAIL: empty completion"; exit 1; fi
if [[ "$base" != "$flash" ]]; then
  echo "FAIL: defaults gave [$base], --block-size 128 --attention-backend flash gave [$flash]"; exit 1
fi
if [[ "$base" != "$hnd" ]]; then echo "FAIL: HND/1 thread gave [$hnd], defaults [$base]"; exit 1; fi
# Tensor parallelism (vLLM's -tp spelling too): tokens and logprobs identical at TP 1, 2 and 4.
j1=$("$KVF" generate --prompt "$PROMPT" --max-tokens 24 --json)
j2=$("$KVF" generate --prompt "$PROMPT" --max-tokens 24 --json -tp 2 --threads 1)
j4=$("$KVF" generate --prompt "$PROMPT" --max-tokens 24 --json -tp=4 --threads 1)
j4b=$("$KVF" generate --prompt "$PROMPT" --max-tokens 24 --json --tensor-parallel-size 4)
if [[ "$j1" != "$j2" || "$j1" != "$j4" || "$j1" != "$j4b" ]]; then
  echo "FAIL: TP 1/2/4 differ: [$j1] [$j2] [$j4] [$j4b]"; exit 1
fi
# tiny-mla (multi-head latent attention): the same at TP 1, 2 and 4 and across geometries.
m1=$("$KVF" generate --model tiny-mla --prompt "$PROMPT" --max-tokens 16 --json)
m2=$("$KVF" generate --model tiny-mla --prompt "$PROMPT" --max-tokens 16 --json -tp 2 --threads 1)
m4=$("$KVF" generate --model tiny-mla --prompt "$PROMPT" --max-tokens 16 --json -tp 4 \
       --block-size 128 --attention-backend flash --kv-cache-layout HND)
if [[ -z "$m1" || "$m1" != "$m2" || "$m1" != "$m4" ]]; then
  echo "FAIL: tiny-mla TP 1/2/4 differ: [$m1] [$m2] [$m4]"; exit 1
fi
if "$KVF" generate --prompt x --model tiny-odd -tp 4 2>/dev/null; then
  echo "FAIL: tiny-odd (6 heads) accepted at TP 4"; exit 1
fi
other=$("$KVF" generate --prompt "Something else entirely" --max-tokens 24)
if [[ "$base" == "$other" ]]; then echo "FAIL: output does not depend on the prompt"; exit 1; fi

help=$("$KVF" generate --help)
for flag in --model --prompt --max-tokens --block-size --attention-backend --kv-cache-layout \
            --kv-cache-dtype --temperature --top-k --top-p --seed --num-kv-blocks \
            --max-model-len --max-num-batched-tokens --threads --tensor-parallel-size --ignore-eos; do
  grep -q -- "$flag" <<<"$help" || { echo "FAIL: --help lacks $flag"; exit 1; }
done

if "$KVF" generate --prompt x --block-size 24 --attention-backend flash 2>/dev/null; then
  echo "FAIL: block size 24 with flash accepted"; exit 1
fi
if "$KVF" generate --prompt x --model nosuchmodel 2>/dev/null; then
  echo "FAIL: unknown model accepted"; exit 1
fi
echo "OK: [$base]"
