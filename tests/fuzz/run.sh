#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR/bin for SECONDS each (default 60), starting from the
# committed seed corpus (tests/fuzz/corpus/<name>, read only) plus a scratch corpus in
# BUILD_DIR/fuzz-work/<name>. Exits non-zero on the first crash, leak, sanitizer report or
# timeout; the reproducer is left in BUILD_DIR/fuzz-work/ (libFuzzer's crash-*/leak-*/timeout-*)
# and must become a file in tests/fuzz/regressions/<name>/ once fixed.
#   usage: tests/fuzz/run.sh BUILD_DIR [SECONDS]
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD_DIR [SECONDS]}" && pwd)
secs=${2:-60}
here="$(cd "$(dirname "$0")" && pwd)"
status=0
for bin in "$build"/bin/fuzz_*; do
  name=$(basename "$bin")
  name=${name#fuzz_}
  [[ -d "$here/corpus/$name" ]] || continue
  work="$build/fuzz-work/$name"
  mkdir -p "$work/corpus"
  dirs=("$work/corpus" "$here/corpus/$name")
  [[ -d "$here/regressions/$name" ]] && dirs+=("$here/regressions/$name")
  echo "== fuzz_$name for ${secs}s"
  # -timeout: one input over 10 s is a hang; -rss_limit_mb bounds allocations from sizes read
  # off the wire; -max_len covers the largest seed with room to grow.
  if ! (cd "$work" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
        -print_final_stats=1 "${dirs[@]}" 2>"$work/log.txt"); then
    tail -n 60 "$work/log.txt"
    echo "fuzz_$name FAILED; reproducer in $work" >&2
    status=1
  else
    grep -E "^stat::number_of_executed_units|^stat::new_units_added|cov:" "$work/log.txt" | tail -n 3
  fi
done
exit $status
