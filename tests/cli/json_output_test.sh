#!/usr/bin/env bash
# Every `--json` output of the kvferry CLI is JSON and nothing else on stdout (label
# integration): bench xfer, bench engine, bench serve (plain and --compare), each with options
# that keep it short. An unused UCX variable is set so that UCX has a warning to print; it must
# reach stderr, never stdout.
#
# usage: tests/cli/json_output_test.sh path/to/kvferry
set -euo pipefail
KVF=$1
export UCX_KVFERRY_UNUSED=1

# shellcheck source=scripts/kvf_processes.sh
. "$(dirname "$0")/../../scripts/kvf_processes.sh"
WORK=$(mktemp -d -t kvferry-json-test.XXXXXX)
PIDS=()
cleanup() {
  kvf_stop_all
  rm -rf "$WORK"
}
trap cleanup EXIT

failures=0
# check_json NAME CMD...: runs CMD, requires exit status 0 and stdout that parses as JSON.
check_json() {
  local name=$1
  shift
  local rc=0
  "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "FAIL: $name exited $rc; stderr tail:"
    tail -5 "$WORK/$name.err"
    failures=$((failures + 1))
  elif ! python3 -m json.tool <"$WORK/$name.out" >/dev/null 2>"$WORK/$name.parse"; then
    echo "FAIL: $name: stdout is not JSON ($(cat "$WORK/$name.parse")); first lines:"
    head -3 "$WORK/$name.out"
    failures=$((failures + 1))
  else
    echo "ok: $name"
  fi
}

# UCX over tcp and over shared memory (user memory and mapped), the socket backend; the ceilings
# run iperf3 and ucx_perftest as children.
check_json bench_xfer "$KVF" bench xfer --json --transports tcp,shm,shm-mapped,socket \
  --ops read,write --sizes 64K --batches 1 --point-ms 50 --working-set-mib 4
if ! grep -q UCX_KVFERRY_UNUSED "$WORK/bench_xfer.err"; then
  echo "FAIL: bench_xfer: UCX's warning about UCX_KVFERRY_UNUSED is not on stderr"
  failures=$((failures + 1))
fi

check_json bench_engine "$KVF" bench engine --json --models tiny --batch-sizes 1 \
  --prompt-len 8 --decode-tokens 2 --threads 1 --min-seconds 0.01

kvf_start serve "$KVF" serve --model tiny --port 0 --threads 1
URL="http://127.0.0.1:$(kvf_port_of serve)"
LOAD=(--num-prompts 2 --input-len 16 --output-len 4 --warmup 0 --concurrency 2)
check_json bench_serve "$KVF" bench serve --json --url "$URL" "${LOAD[@]}"
check_json bench_serve_compare "$KVF" bench serve --json --compare --pd-url "$URL" \
  --colocated-url "$URL" "${LOAD[@]}"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "OK"
