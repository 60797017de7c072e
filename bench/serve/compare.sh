#!/usr/bin/env bash
# Serving benchmark: the same workload on a P/D deployment and on a colocated one with the same
# total cores, via `kvferry bench serve --compare` (docs/benchmarks.md, "## Serving").
#
#   P/D:       P pinned to core 0 (--threads 1), D pinned to core 1 (--threads 1), the proxy
#              unpinned (it only relays bytes)
#   colocated: one instance on cores 0-1 (--threads 2); with WORKLOADS=ttft on core 0 alone
#              (--threads 1), the cores P's prefill has, so only the hand-off's cost differs
#
# usage: bench/serve/compare.sh [path/to/kvferry] [extra `bench serve` flags...]
#   MODEL=tiny|small (default small)  WORKLOADS="prefill decode mixed" (default: those three;
#   "ttft": 32 prompts of 512 tokens one at a time, for the hand-off's own TTFT cost)
set -euo pipefail

BIN=${1:-build/bin/kvferry}
shift || true
MODEL=${MODEL:-small}
WORKLOADS=${WORKLOADS:-"prefill decode mixed"}
NCPU=$(nproc)
if [ "$NCPU" -ge 2 ]; then
  PIN_P="taskset -c 0"
  PIN_D="taskset -c 1"
  PIN_C="taskset -c 0,1"
  [ "$WORKLOADS" = ttft ] && PIN_C="taskset -c 0"
else
  PIN_P=""
  PIN_D=""
  PIN_C=""
fi

# shellcheck source=scripts/kvf_processes.sh
. "$(dirname "$0")/../../scripts/kvf_processes.sh"
WORK=$(mktemp -d -t kvferry-bench-serve.XXXXXX)
PIDS=()
cleanup() {
  kvf_stop_all
  rm -rf "$WORK"
}
trap cleanup EXIT

KV='{"kv_connector":"FerryConnector","kv_role":"kv_both","kv_connector_extra_config":{"side_channel_host":"127.0.0.1","side_channel_port":0}}'
COMMON=(--model "$MODEL" --block-size 128 --attention-backend flash --max-num-batched-tokens 512
  --kv-cache-memory-mb 512)
kvf_start prefill $PIN_P "$BIN" serve --port 0 --threads 1 "${COMMON[@]}" --kv-transfer-config "$KV"
kvf_start decode $PIN_D "$BIN" serve --port 0 --threads 1 "${COMMON[@]}" --kv-transfer-config "$KV"
C_THREADS=2
[ "$WORKLOADS" = ttft ] && C_THREADS=1
kvf_start colocated $PIN_C "$BIN" serve --port 0 --threads "$C_THREADS" "${COMMON[@]}"
P=$(kvf_port_of prefill)
D=$(kvf_port_of decode)
C=$(kvf_port_of colocated)
kvf_start proxy "$BIN" proxy --port 0 --prefill "http://127.0.0.1:$P" --decode "http://127.0.0.1:$D"
X=$(kvf_port_of proxy)

for w in $WORKLOADS; do
  case $w in
    prefill) FLAGS=(--num-prompts 8 --input-len 512 --input-len-range 0.2 --output-len 8 --concurrency 4) ;;
    decode) FLAGS=(--num-prompts 8 --input-len 64 --input-len-range 0.5 --output-len 64 --concurrency 8) ;;
    mixed) FLAGS=(--num-prompts 12 --input-len 384 --input-len-range 0.5 --output-len 32 --request-rate 1 --concurrency 8) ;;
    ttft) FLAGS=(--num-prompts 32 --input-len 512 --output-len 16 --concurrency 1) ;;
    *) echo "unknown workload $w" >&2; exit 2 ;;
  esac
  echo "### workload $w: ${FLAGS[*]} (model $MODEL)"
  "$BIN" bench serve --compare --pd-url "http://127.0.0.1:$X" --colocated-url "http://127.0.0.1:$C" \
    --warmup 2 "${FLAGS[@]}" "$@"
  echo
done
