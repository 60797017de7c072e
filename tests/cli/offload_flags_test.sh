#!/usr/bin/env bash
# `kvferry serve`'s disk-tier and cluster-role flags refuse what cannot work, with an error that
# names the flag, before serving anything (label integration; docs/kv_offload.md).
#
# usage: tests/cli/offload_flags_test.sh path/to/kvferry
set -euo pipefail
KVF=$1
WORK=$(mktemp -d -t kvferry-offload-flags.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

failures=0
# refused NAME WANT ARGS...: `kvferry serve ARGS` exits non-zero within 60 s, stderr has WANT.
refused() {
  local name=$1 want=$2
  shift 2
  local rc=0
  timeout 60 "$KVF" serve --port 0 --threads 1 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
    echo "FAIL: $name: exit status $rc (want a refusal)"
    failures=$((failures + 1))
  elif ! grep -q -- "$want" "$WORK/$name.err"; then
    echo "FAIL: $name: stderr does not say '$want':"
    tail -3 "$WORK/$name.err"
    failures=$((failures + 1))
  else
    echo "ok: $name"
  fi
}

refused dir_without_capacity "--kv-offload-gb" --kv-offload-dir "$WORK/disk"
refused capacity_without_dir "needs --kv-offload-dir" --kv-offload-gb 1
refused zero_capacity "a capacity > 0" --kv-offload-dir "$WORK/disk" --kv-offload-gb 0
refused without_prefix_cache "prefix caching" --kv-offload-dir "$WORK/disk" --kv-offload-gb 1 \
  --no-enable-prefix-caching
touch "$WORK/a-file"
refused dir_is_a_file "cannot create" --kv-offload-dir "$WORK/a-file" --kv-offload-gb 1
refused unknown_cluster_role "--cluster-role" --cluster-role prefil

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all refused as they should be"
