#!/usr/bin/env bash
# The Debian packages as an operator installs them (label package; root, apt-get): cpack makes
# kvferry and kvferry-dev from this build, apt-get installs both (their declared dependencies
# must be enough), then the installed files are checked: `kvferry version` says the package's
# version; the systemd unit is there, valid and not enabled; `kvferry serve` runs as the
# package's user on the built-in model and answers one request; examples/find_package builds
# against /usr. Finally both packages are purged and nothing of them is left.
#
# Exits 77 (skipped) when not root, without apt-get, or when a kvferry package is already
# installed on this machine (it would be replaced, then removed).
#
# usage: tests/deploy/package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "SKIP: needs root and apt-get"
  exit 77
fi
for p in kvferry kvferry-dev; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    echo "SKIP: $p is installed on this machine; not replacing it"
    exit 77
  fi
done

WORK=$(mktemp -d -t kvferry-package-test.XXXXXX)
SERVE_PID=""
APT=(apt-get -y -q -o DPkg::Lock::Timeout=120 --no-install-recommends)
cleanup() {
  if [ -n "$SERVE_PID" ] && kill -0 "$SERVE_PID" 2>/dev/null; then kill -KILL "$SERVE_PID"; fi
  "${APT[@]}" purge kvferry kvferry-dev >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
step() { echo "== $*"; }

step "cpack"
(cd "$BUILD" && cpack -B "$WORK/pkg") >"$WORK/cpack.log" 2>&1 || { cat "$WORK/cpack.log"; fail cpack; }
RUNTIME=$(ls "$WORK"/pkg/kvferry_*.deb)
DEV=$(ls "$WORK"/pkg/kvferry-dev_*.deb)
VERSION=$(dpkg-deb -f "$RUNTIME" Version)
echo "$(basename "$RUNTIME") $(basename "$DEV"), Depends: $(dpkg-deb -f "$RUNTIME" Depends)"
dpkg-deb -f "$RUNTIME" Depends | grep -q libzmq5 || fail "runtime dependencies not declared"

step "apt-get install"
"${APT[@]}" install "$RUNTIME" "$DEV" >"$WORK/install.log" 2>&1 ||
  { cat "$WORK/install.log"; fail "apt-get install"; }
if ldd /usr/bin/kvferry | grep -q "not found"; then
  ldd /usr/bin/kvferry
  fail "a shared library of kvferry is missing"
fi

step "kvferry version"
[ "$(/usr/bin/kvferry version)" = "kvferry $VERSION" ] ||
  fail "kvferry version says '$(/usr/bin/kvferry version)', the package $VERSION"

step "systemd unit, user, /etc/kvferry"
UNIT=/usr/lib/systemd/system/kvferry-serve@.service
[ -f "$UNIT" ] || fail "no $UNIT"
if ls /etc/systemd/system/*.wants/kvferry* >/dev/null 2>&1; then fail "the unit was enabled"; fi
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify --man=no "$UNIT" || fail "systemd-analyze verify $UNIT"
fi
getent passwd kvferry >/dev/null || fail "postinst made no kvferry user"
[ "$(stat -c '%U:%G %a' /etc/kvferry)" = "root:kvferry 750" ] ||
  fail "/etc/kvferry is $(stat -c '%U:%G %a' /etc/kvferry)"

step "kvferry serve as the kvferry user"
cd /
# setpriv execs (runuser would stay the parent and answer SIGTERM itself).
setpriv --reuid kvferry --regid kvferry --init-groups /usr/bin/kvferry serve --model tiny --port 0 --threads 1 \
  >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
PORT=""
for _ in $(seq 1 600); do
  PORT=$(sed -n 's#.*kvferry serve: http://127\.0\.0\.1:\([0-9]*\).*#\1#p' "$WORK/serve.log")
  [ -n "$PORT" ] && break
  kill -0 "$SERVE_PID" 2>/dev/null || { cat "$WORK/serve.log"; fail "serve exited"; }
  sleep 0.1
done
[ -n "$PORT" ] || { cat "$WORK/serve.log"; fail "serve did not listen within 60 s"; }
ANSWER=$(curl -sf --max-time 60 "http://127.0.0.1:$PORT/v1/completions" \
  -H "Content-Type: application/json" \
  -d '{"prompt":"Hello from the package","max_tokens":8,"temperature":0}') ||
  fail "no answer from the installed serve"
python3 -c 'import json,sys; c=json.load(sys.stdin)["choices"][0]
assert c["finish_reason"] == "length" and c["text"], c' <<<"$ANSWER" ||
  fail "unexpected answer: $ANSWER"
kill -TERM "$SERVE_PID"
wait "$SERVE_PID" || fail "serve exited $? on SIGTERM"
SERVE_PID=""

step "examples/find_package against /usr"
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$SRC/examples/find_package" -B "$WORK/example" "${GEN[@]}" "${LAUNCHER[@]}" \
  -DCMAKE_BUILD_TYPE=Release >"$WORK/example.log" 2>&1 || { cat "$WORK/example.log"; fail cmake; }
grep -q "kvferry_DIR:PATH=/usr/lib/cmake/kvferry" "$WORK/example/CMakeCache.txt" ||
  fail "find_package(kvferry) did not use the installed package"
cmake --build "$WORK/example" -j 2 >>"$WORK/example.log" 2>&1 ||
  { cat "$WORK/example.log"; fail "example build"; }
"$WORK/example/transfer_loopback"
"$WORK/example/connector_embed"

step "apt-get purge"
"${APT[@]}" purge kvferry kvferry-dev >"$WORK/purge.log" 2>&1 ||
  { cat "$WORK/purge.log"; fail "apt-get purge"; }
for path in /usr/bin/kvferry "$UNIT" /usr/include/kvferry /usr/lib/cmake/kvferry /etc/kvferry; do
  [ ! -e "$path" ] || fail "$path left after purge"
done
echo "OK: kvferry $VERSION packaged, installed, served, built against, purged"
