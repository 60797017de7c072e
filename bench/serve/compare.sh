#!/usr/bin/env bash
# Serving benchmark: the same workload on a P/D deployment and on a colocated one with the same
# total cores, via `kvferry bench serve --compare` (docs/benchmarks.md, "## Serving").
#
#   P/D:       P pinned to core 0 (--threads 1), D pinned to core 1 (--threads 1), the proxy
#              unpinned (it only relays bytes)
#   colocated: one instance on cores 0-1 (--threads 2)
#
# usage: bench/serve/compare.sh [path/to/kvferry] [extra `bench serve` flags...]
#   MODEL=tiny|small (default small)  WORKLOADS="prefill decode mixed" (default: all three)
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
else
  PIN_P=""
  PIN_D=""
  PIN_C=""
fi

WORK=$(mktemp -d -t kvferry-bench-serve.XXXXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  sleep 1
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

launch() {  # launch NAME PIN ARGS...
  local name=$1 pin=$2
  shift 2
  $pin "$BIN" "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
}
port_of() {  # port_of NAME: the logged port once /health answers (60 s at most)
  local port=""
  for _ in $(seq 1 300); do
    port=$(sed -n 's#.*kvferry [a-z]*: http://127\.0\.0\.1:\([0-9]*\).*#\1#p' "$WORK/$1.log" | head -1)
    if [ -n "$port" ] && curl -sf --max-time 2 "http://127.0.0.1:$port/health" >/dev/null; then
      echo "$port"
      return 0
    fi
    sleep 0.2
  done
  echo "compare: $1 did not start" >&2
  cat "$WORK/$1.log" >&2
  return 1
}
KV='{"kv_connector":"FerryConnector","kv_role":"kv_both","kv_connector_extra_config":{"side_channel_host":"127.0.0.1","side_channel_port":0}}'
COMMON=(--model "$MODEL" --block-size 128 --attention-backend flash --max-num-batched-tokens 512
  --kv-cache-memory-mb 512)
launch prefill "$PIN_P" serve --port 0 --threads 1 "${COMMON[@]}" --kv-transfer-config "$KV"
launch decode "$PIN_D" serve --port 0 --threads 1 "${COMMON[@]}" --kv-transfer-config "$KV"
launch colocated "$PIN_C" serve --port 0 --threads 2 "${COMMON[@]}"
P=$(port_of prefill)
D=$(port_of decode)
C=$(port_of colocated)
launch proxy "" proxy --port 0 --prefill "http://127.0.0.1:$P" --decode "http://127.0.0.1:$D"
X=$(port_of proxy)

for w in $WORKLOADS; do
  case $w in
    prefill) FLAGS=(--num-prompts 8 --input-len 512 --input-len-range 0.2 --output-len 8 --concurrency 4) ;;
    decode) FLAGS=(--num-prompts 8 --input-len 64 --input-len-range 0.5 --output-len 64 --concurrency 8) ;;
    mixed) FLAGS=(--num-prompts 12 --input-len 384 --input-len-range 0.5 --output-len 32 --request-rate 1 --concurrency 8) ;;
    *) echo "unknown workload $w" >&2; exit 2 ;;
  esac
  echo "### workload $w: ${FLAGS[*]} (model $MODEL)"
  "$BIN" bench serve --compare --pd-url "http://127.0.0.1:$X" --colocated-url "http://127.0.0.1:$C" \
    --warmup 2 "${FLAGS[@]}" "$@"
  echo
done
