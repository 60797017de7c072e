#!/usr/bin/env bash
# kvferry cluster demo (make demo-cluster): etcd, two prefill instances (P), two decode
# instances (D) and a proxy on loopback, all found through the registry; a colocated instance
# for reference. Sends 32 prompts in 4 families (each family shares a 200-byte preamble, so
# prefix affinity sends a family to one P) through the proxy and to the colocated instance,
# prints the routing table and the per-instance counts, and ends with
#   cluster == colocated: N/N identical
# Exits non-zero on any mismatch or failed request, when a request's KV was not pulled from a P
# (equal output alone would not show it: a recompute gives the same text), when an instance got
# no request, and when a block is left held. Stops every process it started.
#
# usage: scripts/cluster.sh [path/to/kvferry]      (make demo-cluster passes build/bin/kvferry)
set -euo pipefail

BIN=${1:-build/bin/kvferry}
STARTUP_TIMEOUT_S=${STARTUP_TIMEOUT_S:-60}
FAMILIES=4
PER_FAMILY=8
NUM_PROMPTS=$((FAMILIES * PER_FAMILY))
[ -x "$BIN" ] || { echo "cluster: $BIN is not executable (run make first)" >&2; exit 2; }
command -v curl >/dev/null || { echo "cluster: curl is required (scripts/install-deps.sh)" >&2; exit 2; }

# shellcheck source=scripts/kvf_processes.sh
. "$(dirname "$0")/kvf_processes.sh"
# shellcheck source=scripts/kvf_etcd.sh
. "$(dirname "$0")/kvf_etcd.sh"
WORK=$(mktemp -d -t kvferry-cluster.XXXXXX)
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
  if [ "$rc" != 0 ]; then echo "cluster: failed (rc $rc); logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM

kv_config() {  # kv_config ROLE ENGINE_ID
  printf '{"kv_connector":"FerryConnector","kv_role":"%s","engine_id":"%s","kv_connector_extra_config":{"side_channel_host":"127.0.0.1","side_channel_port":0}}' "$1" "$2"
}

echo "== starting etcd and the cluster (logs in $WORK)"
kvf_start_etcd etcd
REGISTRY="etcd://$ETCD_ENDPOINT/demo"
for i in 0 1; do
  kvf_start "p$i" "$BIN" serve --port 0 --threads 1 --registry "$REGISTRY" --registry-ttl 5 \
    --kv-transfer-config "$(kv_config kv_producer "p$i")"
  kvf_start "d$i" "$BIN" serve --port 0 --threads 1 --registry "$REGISTRY" --registry-ttl 5 \
    --block-size 32 --kv-cache-layout HND --kv-transfer-config "$(kv_config kv_consumer "d$i")"
done
kvf_start colocated "$BIN" serve --port 0 --threads 2
kvf_start proxy "$BIN" proxy --port 0 --registry "$REGISTRY"
declare -A PORT
for n in p0 p1 d0 d1 colocated proxy; do PORT[$n]=$(kvf_port_of "$n"); done
kvf_wait_members "${PORT[proxy]}" 4
echo "etcd      $ETCD_ENDPOINT (namespace demo)"
echo "proxy     http://127.0.0.1:${PORT[proxy]}   --registry $REGISTRY"

# 4 families of 8 prompts: a family's preamble is 200 bytes, each prompt adds its own question.
PROMPTS="$WORK/prompts.txt"
for f in $(seq 1 $FAMILIES); do
  preamble=$(printf 'Family %d preamble: %s' "$f" "$(printf 'context-%d-%.0s' "$f" $(seq 1 20))" | cut -c1-200)
  for q in $(seq 1 $PER_FAMILY); do echo "$preamble Question $q: what is $((f * q)) times $q?"; done
done >"$PROMPTS"
WORKLOAD=(--prompts-file "$PROMPTS" --output-len 24 --output-len-range 0.3 --concurrency 8
  --warmup 0 --seed 3 --temperature 0)
echo
echo "== $NUM_PROMPTS prompts through the proxy"
"$BIN" bench serve --url "http://127.0.0.1:${PORT[proxy]}" "${WORKLOAD[@]}" --save-outputs "$WORK/cluster.jsonl"
echo
echo "== the same prompts on the colocated instance"
"$BIN" bench serve --url "http://127.0.0.1:${PORT[colocated]}" "${WORKLOAD[@]}" --save-outputs "$WORK/colocated.jsonl"

metric() {  # metric PORT NAME_WITH_LABELS
  curl -sf --max-time 5 "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m { print $2 }'
}
echo
echo "== routing table (GET /cluster on the proxy)"
curl -sf --max-time 5 "http://127.0.0.1:${PORT[proxy]}/cluster" >"$WORK/table.json"
python3 - "$WORK/table.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
print("registry connected:", t["registry"]["connected"])
print("%-8s %-8s %-8s %-24s %12s %12s" % ("member", "role", "state", "url", "prefill legs",
                                          "decode legs"))
for m in t["members"]:
    print("%-8s %-8s %-8s %-24s %12d %12d" % (m["id"], m["role"], m["state"], m["url"],
                                              m["routed"]["prefill"], m["routed"]["decode"]))
PY
echo
echo "== per-instance counts (each instance's /metrics)"
printf '%-4s %9s %9s %16s %8s %8s\n' "" requests leases "prefix hit tok" pulls failures
FAIL=0
PULLED=0
for n in p0 p1 d0 d1; do
  port=${PORT[$n]}
  reqs=$(metric "$port" 'kvferry:request_success_total{finished_reason="length"}')
  failures=0
  for kind in handshake transfer deadline generation; do
    failures=$(awk -v a="$failures" -v b="$(metric "$port" "kvferry:kv_transfer_failures_total{kind=\"$kind\"}")" 'BEGIN { print a + b }')
  done
  pulls=$(awk -v a="$(metric "$port" kvferry:kv_transfers_total)" -v b="$(metric "$port" kvferry:kv_notify_only_total)" 'BEGIN { print a + b }')
  printf '%-4s %9s %9s %16s %8s %8s\n' "$n" "${reqs:-0}" "$(metric "$port" 'kvferry:kv_leases_total{event="granted"}')" \
    "$(metric "$port" kvferry:prefix_cache_hit_tokens_total)" "$pulls" "$failures"
  PULLED=$(awk -v a="$PULLED" -v b="$pulls" 'BEGIN { print a + b }')
  [ "$failures" = 0 ] || FAIL=1
  [ "${reqs:-0}" != 0 ] || { echo "cluster: $n got no request" >&2; FAIL=1; }
done
printf 'proxy retries: prefill %s, decode %s\n' "$(metric "${PORT[proxy]}" 'kvferry:proxy_retries_total{leg="prefill"}')" \
  "$(metric "${PORT[proxy]}" 'kvferry:proxy_retries_total{leg="decode"}')"

# Every lease granted by a P is released once its D notified: nothing stays held.
HELD=0
for n in p0 p1; do
  for _ in $(seq 1 50); do
    h=$(metric "${PORT[$n]}" 'kvferry:kv_blocks{state="held_for_transfer"}')
    [ "${h:-1}" = 0 ] && break
    sleep 0.1
  done
  [ "${h:-1}" = 0 ] || { echo "cluster: $n still holds $h blocks" >&2; HELD=1; }
done

stop_all
TOTAL=$(wc -l <"$WORK/colocated.jsonl")
SAME=$(awk 'NR == FNR { a[FNR] = $0; next } ($0 == a[FNR] && $0 ~ /"ok":true/) { n++ } END { print n + 0 }' \
  "$WORK/cluster.jsonl" "$WORK/colocated.jsonl")
echo
echo "requests whose KV was pulled from a P: $PULLED of $NUM_PROMPTS"
echo "cluster == colocated: $SAME/$TOTAL identical"
[ "$PULLED" = "$NUM_PROMPTS" ] || { echo "cluster: not every request's KV was pulled" >&2; exit 1; }
[ "$FAIL" = 0 ] && [ "$HELD" = 0 ] && [ "$SAME" = "$TOTAL" ] && [ "$TOTAL" = "$NUM_PROMPTS" ]
