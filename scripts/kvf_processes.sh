# Shell helpers to run kvferry processes in the background and find their ports; sourced by
# scripts/demo.sh and bench/serve/compare.sh. The caller sets WORK (a log folder) and
# PIDS=() before use, and STARTUP_TIMEOUT_S (default 60).

# kvf_start NAME CMD...: runs CMD (e.g. `taskset -c 0 build/bin/kvferry serve ...`) in the
# background, logging to $WORK/NAME.log; remembers its pid in PIDS and PID_NAME.
kvf_start() {
  local name=$1
  shift
  "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  eval "PID_$name=$!"
}

# kvf_port_of NAME: the port the instance logged ("kvferry serve: http://127.0.0.1:PORT ..."),
# once it answers /health. Fails (with the log's tail) if it exits or is not healthy within
# STARTUP_TIMEOUT_S.
kvf_port_of() {
  local name=$1 pid_var="PID_$1" port=""
  local deadline=$((SECONDS + ${STARTUP_TIMEOUT_S:-60}))
  while [ $SECONDS -lt $deadline ]; do
    if ! kill -0 "${!pid_var}" 2>/dev/null; then
      echo "$name exited during startup:" >&2
      tail -20 "$WORK/$name.log" >&2
      return 1
    fi
    # The log appears once the background shell has opened it.
    port=$(sed -n 's#.*kvferry [a-z]*: http://127\.0\.0\.1:\([0-9]*\).*#\1#p' "$WORK/$name.log" \
      2>/dev/null | head -1)
    if [ -n "$port" ] && curl -sf --max-time 2 "http://127.0.0.1:$port/health" >/dev/null; then
      echo "$port"
      return 0
    fi
    sleep 0.2
  done
  echo "$name not healthy after ${STARTUP_TIMEOUT_S:-60}s" >&2
  tail -20 "$WORK/$name.log" >&2
  return 1
}

# kvf_stop_all: SIGTERM to every started process, up to 10 s for a graceful exit, then SIGKILL.
kvf_stop_all() {
  local pid alive
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 100); do
    alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
