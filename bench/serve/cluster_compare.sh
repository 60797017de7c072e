#!/usr/bin/env bash
# Cluster scaling benchmark: the same workload through a 1P1D and a 2P2D cluster with the same
# cores (docs/benchmarks.md, "## Cluster: 1P1D vs 2P2D"). Both are found through etcd by a
# `kvferry proxy --registry`, as in production.
#
#   1P1D: P on core 0, D on core 1                      (--threads 1 each)
#   2P2D: both P on core 0, both D on core 1            (--threads 1 each)
#   etcd, the proxies and the load generator unpinned (they only relay bytes)
#
# `kvferry bench serve --compare --json` runs each workload on both (2P2D first) and checks
# that they produced identical tokens and logprobs; a table of both and their ratio follows.
#
# usage: bench/serve/cluster_compare.sh [path/to/kvferry]
#   MODEL=tiny|small (default small)  WORKLOADS="prefill decode mixed" (default: all three)
set -euo pipefail

BIN=${1:-build/bin/kvferry}
MODEL=${MODEL:-small}
WORKLOADS=${WORKLOADS:-"prefill decode mixed"}
PIN_P="" PIN_D=""
if [ "$(nproc)" -ge 2 ]; then PIN_P="taskset -c 0" PIN_D="taskset -c 1"; fi

# shellcheck source=scripts/kvf_processes.sh
. "$(dirname "$0")/../../scripts/kvf_processes.sh"
# shellcheck source=scripts/kvf_etcd.sh
. "$(dirname "$0")/../../scripts/kvf_etcd.sh"
WORK=$(mktemp -d -t kvferry-bench-cluster.XXXXXX)
PIDS=()
cleanup() {
  kvf_stop_all
  rm -rf "$WORK"
}
trap cleanup EXIT

kv_config() {  # kv_config ROLE ENGINE_ID
  printf '{"kv_connector":"FerryConnector","kv_role":"%s","engine_id":"%s","kv_connector_extra_config":{"side_channel_host":"127.0.0.1","side_channel_port":0}}' "$1" "$2"
}
COMMON=(--model "$MODEL" --block-size 128 --attention-backend flash --max-num-batched-tokens 512
  --kv-cache-memory-mb 512 --threads 1)

kvf_start_etcd etcd
for cluster in one two; do
  n=1
  [ "$cluster" = two ] && n=2
  for i in $(seq 0 $((n - 1))); do
    kvf_start "${cluster}_p$i" $PIN_P "$BIN" serve --port 0 "${COMMON[@]}" \
      --registry "etcd://$ETCD_ENDPOINT/$cluster" --kv-transfer-config "$(kv_config kv_producer "$cluster-p$i")"
    kvf_start "${cluster}_d$i" $PIN_D "$BIN" serve --port 0 "${COMMON[@]}" \
      --registry "etcd://$ETCD_ENDPOINT/$cluster" --kv-transfer-config "$(kv_config kv_consumer "$cluster-d$i")"
  done
  kvf_start "${cluster}_proxy" "$BIN" proxy --port 0 --registry "etcd://$ETCD_ENDPOINT/$cluster"
done
ONE=$(kvf_port_of one_proxy)
TWO=$(kvf_port_of two_proxy)
kvf_wait_members "$ONE" 2
kvf_wait_members "$TWO" 4

for w in $WORKLOADS; do
  case $w in
    prefill) FLAGS=(--num-prompts 16 --input-len 512 --input-len-range 0.2 --output-len 8 --concurrency 8) ;;
    decode) FLAGS=(--num-prompts 16 --input-len 64 --input-len-range 0.5 --output-len 64 --concurrency 16) ;;
    mixed) FLAGS=(--num-prompts 24 --input-len 384 --input-len-range 0.5 --output-len 32 --request-rate 2 --concurrency 16) ;;
    *) echo "unknown workload $w" >&2; exit 2 ;;
  esac
  echo "### workload $w: ${FLAGS[*]} (model $MODEL)"
  "$BIN" bench serve --compare --pd-url "http://127.0.0.1:$TWO" --colocated-url "http://127.0.0.1:$ONE" \
    --warmup 2 --json "${FLAGS[@]}" >"$WORK/$w.json"
  python3 - "$WORK/$w.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
two, one = r["pd"], r["colocated"]
rows = [("req/s", "request_throughput", None), ("output tok/s", "output_token_throughput", None),
        ("TTFT p50 ms", "ttft", "p50_ms"), ("TTFT p90 ms", "ttft", "p90_ms"),
        ("ITL p50 ms", "itl", "p50_ms"), ("ITL p99 ms", "itl", "p99_ms"),
        ("E2E p50 ms", "e2e", "p50_ms")]
print("%-14s %10s %10s %8s" % ("metric", "1P1D", "2P2D", "2P2D/1P1D"))
for name, k, sub in rows:
    a, b = (one[k], two[k]) if sub is None else (one[k][sub], two[k][sub])
    print("%-14s %10.2f %10.2f %8.2f" % (name, a, b, b / a if a else 0))
print("identical outputs: %d/%d; failed: 1P1D %d, 2P2D %d" %
      (r["identical"], r["prompts"], one["failed"], two["failed"]))
PY
  echo
done
for n in one_proxy two_proxy; do
  echo "$n: legs per member: $(curl -sf "http://127.0.0.1:$(kvf_port_of $n)/cluster" |
    python3 -c 'import json,sys; print(", ".join("%s %d/%d" % (m["id"], m["routed"]["prefill"], m["routed"]["decode"]) for m in json.load(sys.stdin)["members"]))')"
done
