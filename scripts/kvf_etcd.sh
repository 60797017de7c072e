# Shell helpers to run a single-member etcd on loopback for a kvferry cluster; sourced by
# scripts/cluster.sh and bench/serve/cluster_compare.sh after scripts/kvf_processes.sh (same
# WORK / PIDS conventions).

# kvf_free_port: a TCP port nobody listens on right now.
kvf_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# kvf_start_etcd NAME: starts etcd (data in $WORK/NAME.data, log in $WORK/NAME.log) on two free
# loopback ports, waits for /health (STARTUP_TIMEOUT_S), and sets ETCD_ENDPOINT (HOST:PORT).
# Not in a $(...) subshell: kvf_start must record the pid in this shell's PIDS.
kvf_start_etcd() {
  local name=$1 client peer
  command -v etcd >/dev/null || { echo "etcd is required (scripts/install-deps.sh installs etcd-server)" >&2; return 1; }
  client=$(kvf_free_port)
  peer=$(kvf_free_port)
  kvf_start "$name" etcd --name "$name" --data-dir "$WORK/$name.data" \
    --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "$name=http://127.0.0.1:$peer"
  local deadline=$((SECONDS + ${STARTUP_TIMEOUT_S:-60}))
  while [ $SECONDS -lt $deadline ]; do
    if curl -sf --max-time 2 "http://127.0.0.1:$client/health" | grep -q '"health":"true"'; then
      ETCD_ENDPOINT="127.0.0.1:$client"
      return 0
    fi
    sleep 0.2
  done
  echo "etcd not healthy after ${STARTUP_TIMEOUT_S:-60}s" >&2
  tail -20 "$WORK/$name.log" >&2
  return 1
}

# kvf_wait_members PROXY_PORT N: waits until the proxy's routing table has N healthy members.
kvf_wait_members() {
  local deadline=$((SECONDS + ${STARTUP_TIMEOUT_S:-60})) n
  while [ $SECONDS -lt $deadline ]; do
    n=$(curl -sf --max-time 2 "http://127.0.0.1:$1/cluster" | grep -o '"state":"healthy"' | wc -l || true)
    [ "$n" = "$2" ] && return 0
    sleep 0.2
  done
  echo "the proxy did not see $2 healthy members within ${STARTUP_TIMEOUT_S:-60}s:" >&2
  curl -sf --max-time 2 "http://127.0.0.1:$1/cluster" >&2
  return 1
}
