#!/usr/bin/env bash
# kvferry demo: a prefill instance (P), a decode instance (D) of a different KV geometry, a
# proxy, and a colocated instance, all on loopback with the built-in model. Sends the same batch
# of varied prompts through the proxy (P -> D) and to the colocated instance, prints the transfer
# statistics and TTFT / inter-token latency of both ways, and ends with
#   PD == colocated: N/N identical
# Exits non-zero on any mismatch or failure; stops every process it started.
#
# usage: scripts/demo.sh [path/to/kvferry]      (make demo passes build/bin/kvferry)
set -euo pipefail

BIN=${1:-build/bin/kvferry}
NUM_PROMPTS=${NUM_PROMPTS:-24}
STARTUP_TIMEOUT_S=${STARTUP_TIMEOUT_S:-60}
[ -x "$BIN" ] || { echo "demo: $BIN is not executable (run make first)" >&2; exit 2; }
command -v curl >/dev/null || { echo "demo: curl is required (scripts/install-deps.sh)" >&2; exit 2; }

WORK=$(mktemp -d -t kvferry-demo.XXXXXX)
PIDS=()
STOPPED=0

stop_all() {
  [ "$STOPPED" = 1 ] && return 0
  STOPPED=1
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 100); do  # up to 10 s for a graceful exit
    local alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
on_exit() {
  local rc=$?
  stop_all
  if [ "$rc" != 0 ]; then
    echo "demo: failed (rc $rc); logs kept in $WORK" >&2
  else
    rm -rf "$WORK"
  fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# start NAME ARGS...: runs `kvferry ARGS` in the background, logging to $WORK/NAME.log.
start() {
  local name=$1
  shift
  "$BIN" "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  eval "PID_$name=$!"
}

# port_of NAME: the port the instance logged ("kvferry serve: http://127.0.0.1:PORT ..."), once
# it is listening and answers /health. Fails after STARTUP_TIMEOUT_S.
port_of() {
  local name=$1 pid_var="PID_$1" port=""
  local deadline=$((SECONDS + STARTUP_TIMEOUT_S))
  while [ $SECONDS -lt $deadline ]; do
    if ! kill -0 "${!pid_var}" 2>/dev/null; then
      echo "demo: $name exited during startup:" >&2
      tail -20 "$WORK/$name.log" >&2
      return 1
    fi
    port=$(sed -n 's#.*kvferry [a-z]*: http://127\.0\.0\.1:\([0-9]*\).*#\1#p' "$WORK/$name.log" | head -1)
    if [ -n "$port" ] && curl -sf --max-time 2 "http://127.0.0.1:$port/health" >/dev/null; then
      echo "$port"
      return 0
    fi
    sleep 0.2
  done
  echo "demo: $name not healthy after ${STARTUP_TIMEOUT_S}s" >&2
  tail -20 "$WORK/$name.log" >&2
  return 1
}

kv_config() {  # kv_config ENGINE_ID
  printf '{"kv_connector":"FerryConnector","kv_role":"kv_both","engine_id":"%s","kv_connector_extra_config":{"side_channel_host":"127.0.0.1","side_channel_port":0}}' "$1"
}

echo "== starting instances (logs in $WORK)"
start prefill serve --port 0 --block-size 128 --attention-backend flash --kv-cache-layout NHD \
  --threads 1 --kv-transfer-config "$(kv_config demo-prefill)"
start decode serve --port 0 --block-size 32 --attention-backend paged --kv-cache-layout HND \
  --threads 1 --kv-transfer-config "$(kv_config demo-decode)"
start colocated serve --port 0 --threads 2
P_PORT=$(port_of prefill)
D_PORT=$(port_of decode)
C_PORT=$(port_of colocated)
start proxy proxy --port 0 --prefill "http://127.0.0.1:$P_PORT" --decode "http://127.0.0.1:$D_PORT"
X_PORT=$(port_of proxy)
echo "P         http://127.0.0.1:$P_PORT   block 128, flash backend (kernel block 64), NHD"
echo "D         http://127.0.0.1:$D_PORT   block 32, paged backend (kernel block 32), HND"
echo "proxy     http://127.0.0.1:$X_PORT   P -> D"
echo "colocated http://127.0.0.1:$C_PORT   block 16, paged, NHD"

# Varied prompts: 20..380 bytes (some shorter than P's 128-token block), 16..48 output tokens.
WORKLOAD=(--num-prompts "$NUM_PROMPTS" --input-len 200 --input-len-range 0.9 --output-len 32
  --output-len-range 0.5 --concurrency 4 --warmup 0 --seed 7 --temperature 0)
echo
echo "== $NUM_PROMPTS prompts through the proxy (P -> D)"
"$BIN" bench serve --url "http://127.0.0.1:$X_PORT" "${WORKLOAD[@]}" --save-outputs "$WORK/pd.jsonl"
echo
echo "== the same prompts on the colocated instance"
"$BIN" bench serve --url "http://127.0.0.1:$C_PORT" "${WORKLOAD[@]}" \
  --save-outputs "$WORK/colocated.jsonl"

echo
echo "== transfer statistics"
metric() {  # metric PORT NAME_WITH_LABELS
  curl -sf --max-time 5 "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m { print $2 }'
}
D_BYTES=$(metric "$D_PORT" kvferry:kv_transfer_bytes_total)
D_SECONDS=$(metric "$D_PORT" kvferry:kv_transfer_duration_seconds_total)
printf 'D pulls            %s\n' "$(metric "$D_PORT" kvferry:kv_transfers_total)"
printf 'D bytes            %s\n' "$D_BYTES"
printf 'D descriptors      %s\n' "$(metric "$D_PORT" kvferry:kv_transfer_descriptors_total)"
printf 'D pull time        %s s (%s MB/s)\n' "$D_SECONDS" \
  "$(awk -v b="$D_BYTES" -v s="$D_SECONDS" 'BEGIN { if (s > 0) printf "%.1f", b / s / 1e6; else print "n/a" }')"
printf 'D load failures    handshake %s, transfer %s, deadline %s, generation %s\n' \
  "$(metric "$D_PORT" 'kvferry:kv_transfer_failures_total{kind="handshake"}')" \
  "$(metric "$D_PORT" 'kvferry:kv_transfer_failures_total{kind="transfer"}')" \
  "$(metric "$D_PORT" 'kvferry:kv_transfer_failures_total{kind="deadline"}')" \
  "$(metric "$D_PORT" 'kvferry:kv_transfer_failures_total{kind="generation"}')"
printf 'P leases           granted %s, released by D %s, expired %s; blocks held now %s\n' \
  "$(metric "$P_PORT" 'kvferry:kv_leases_total{event="granted"}')" \
  "$(metric "$P_PORT" 'kvferry:kv_leases_total{event="released_by_notification"}')" \
  "$(metric "$P_PORT" 'kvferry:kv_leases_total{event="expired"}')" \
  "$(metric "$P_PORT" 'kvferry:kv_blocks{state="held_for_transfer"}')"

stop_all
TOTAL=$(wc -l <"$WORK/colocated.jsonl")
SAME=$(awk 'NR == FNR { a[FNR] = $0; next } ($0 == a[FNR] && $0 ~ /"ok":true/) { n++ } END { print n + 0 }' \
  "$WORK/pd.jsonl" "$WORK/colocated.jsonl")
echo
echo "PD == colocated: $SAME/$TOTAL identical"
[ "$SAME" = "$TOTAL" ] && [ "$TOTAL" -gt 0 ]
