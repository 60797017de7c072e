#!/usr/bin/env bash
# kvferry demo: a prefill instance (P), a decode instance (D) of a different KV geometry, a
# proxy, and a colocated instance, all on loopback with the built-in model. Sends the same batch
# of varied prompts through the proxy (P -> D) and to the colocated instance, prints the transfer
# statistics and TTFT / inter-token latency of both ways, and ends with
#   PD == colocated: N/N identical
# Exits non-zero on any mismatch or failure, and when any request's KV was not pulled (a
# fallback to recompute gives the same output, so equal output alone proves nothing); stops
# every process it started.
#
# usage: scripts/demo.sh [path/to/kvferry]      (make demo passes build/bin/kvferry)
set -euo pipefail

BIN=${1:-build/bin/kvferry}
NUM_PROMPTS=${NUM_PROMPTS:-24}
STARTUP_TIMEOUT_S=${STARTUP_TIMEOUT_S:-60}
[ -x "$BIN" ] || { echo "demo: $BIN is not executable (run make first)" >&2; exit 2; }
command -v curl >/dev/null || { echo "demo: curl is required (scripts/install-deps.sh)" >&2; exit 2; }

# shellcheck source=scripts/kvf_processes.sh
. "$(dirname "$0")/kvf_processes.sh"
WORK=$(mktemp -d -t kvferry-demo.XXXXXX)
PIDS=()
STOPPED=0

stop_all() {
  [ "$STOPPED" = 1 ] && return 0
  STOPPED=1
  kvf_stop_all
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

kv_config() {  # kv_config ENGINE_ID
  printf '{"kv_connector":"FerryConnector","kv_role":"kv_both","engine_id":"%s","kv_connector_extra_config":{"side_channel_host":"127.0.0.1","side_channel_port":0}}' "$1"
}

echo "== starting instances (logs in $WORK)"
kvf_start prefill "$BIN" serve --port 0 --block-size 128 --attention-backend flash --kv-cache-layout NHD \
  --threads 1 --kv-transfer-config "$(kv_config demo-prefill)"
kvf_start decode "$BIN" serve --port 0 --block-size 32 --attention-backend paged --kv-cache-layout HND \
  --threads 1 --kv-transfer-config "$(kv_config demo-decode)"
kvf_start colocated "$BIN" serve --port 0 --threads 2
P_PORT=$(kvf_port_of prefill)
D_PORT=$(kvf_port_of decode)
C_PORT=$(kvf_port_of colocated)
kvf_start proxy "$BIN" proxy --port 0 --prefill "http://127.0.0.1:$P_PORT" --decode "http://127.0.0.1:$D_PORT"
X_PORT=$(kvf_port_of proxy)
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
printf 'D bytes            %s (%s read by one memcpy from P'"'"'s mapped memory)\n' "$D_BYTES" \
  "$(metric "$D_PORT" kvferry:kv_transfer_memcpy_bytes_total)"
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


# Every request's KV must have come from P: one pull (or, when D already held it, a
# notification) per request, and no fallback of any kind on D or staging failure on P.
FALLBACKS=0
for kind in handshake transfer deadline generation; do
  n=$(metric "$D_PORT" "kvferry:kv_transfer_failures_total{kind=\"$kind\"}")
  FALLBACKS=$(awk -v a="$FALLBACKS" -v b="${n:-1}" 'BEGIN { print a + b }')
done
STAGE_FAILURES=$(metric "$P_PORT" kvferry:kv_stage_failures_total)
PULLED=$(awk -v a="$(metric "$D_PORT" kvferry:kv_transfers_total)" \
  -v b="$(metric "$D_PORT" kvferry:kv_notify_only_total)" 'BEGIN { print a + b }')
printf 'requests pulled    %s of %s (fallbacks %s, P staging failures %s)\n' \
  "$PULLED" "$NUM_PROMPTS" "$FALLBACKS" "${STAGE_FAILURES:-?}"

stop_all
TOTAL=$(wc -l <"$WORK/colocated.jsonl")
SAME=$(awk 'NR == FNR { a[FNR] = $0; next } ($0 == a[FNR] && $0 ~ /"ok":true/) { n++ } END { print n + 0 }' \
  "$WORK/pd.jsonl" "$WORK/colocated.jsonl")
echo
echo "PD == colocated: $SAME/$TOTAL identical"
if [ "$PULLED" != "$NUM_PROMPTS" ] || [ "$FALLBACKS" != 0 ] || [ "${STAGE_FAILURES:-1}" != 0 ]; then
  echo "demo: not every request's KV was pulled from P (see the transfer statistics)" >&2
  exit 1
fi
[ "$SAME" = "$TOTAL" ] && [ "$TOTAL" -gt 0 ]
