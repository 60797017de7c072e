#!/usr/bin/env bash
# Installs the Debian packages kvferry needs to build, test and benchmark, and any extra
# packages named as arguments (e.g. `scripts/install-deps.sh libmsgpack-dev`, which
# `make msgpack-c-check` installs to build beside the msgpack C library).
# Idempotent: installs only what is missing. Needs root (or sudo) only when
# something is missing; otherwise it says so and exits 0.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  clang clang-format clang-tidy libclang-rt-14-dev
  libucx-dev ucx-utils                     # data plane (transfer/backends/ucx)
  libzmq3-dev cppzmq-dev                   # control plane (connector side channel)
  libmsgpack-cxx-dev                       # handshake encoding
  etcd-server etcd-client                  # cluster registry (src/cluster; etcdctl for operators)
  nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev libcpp-httplib-dev
  libpcre2-dev                             # tokenizer: pre-tokenizer regexes (\p{L}, lookahead)
  libutf8proc-dev                          # tokenizer: NFC/NFKC normalizers, Unicode categories
  libxxhash-dev                            # kv_offload: block file checksums (XXH3)
  libssl-dev                               # http: TLS listener and API key digests (OpenSSL 3)
  openssl                                  # openssl CLI: test certificates made per run
  dpkg-dev                                 # make package: dpkg-shlibdeps finds the .deb's dependencies
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libopenblas-dev                          # benchmark-only peer for the matmul
  iperf3 iproute2 procps psmisc curl       # benchmark ceilings, netns fault tests, e2e scripts
  iptables                                 # tests/chaos: a P-D link's delay/loss/reordering (NFQUEUE)
  time                                     # bench/models/load_rss.sh: peak RSS (/usr/bin/time -v)
  jq                                       # bench/models/llamacpp_compare.sh: JSON of both engines
  python3                                  # tests/fault and tests/load drivers (stdlib only)
  python3-venv                             # build/pyenv, build/venv: the Python package's tools
  python3-dev                              # Python.h for the package's extension (python/)
  python3-jinja2                           # tests/jinja: Jinja2 is the oracle for kvferry::jinja
  gnuplot-nox                              # bench serve/xfer --plot: SVG pictures of the figures
  "$@"                                     # extra packages from the command line
)

# Tools that another packaging may provide (NodeSource's nodejs includes npm): present if the
# command is, else installed from Debian.
TOOLS=(
  node:nodejs                              # tests/refs: the tokenizer oracle and llama.cpp
  npm:npm                                  # scripts/install-refs.sh installs the pinned refs
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
for t in "${TOOLS[@]}"; do
  command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t#*:}")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} Debian packages and ${#TOOLS[@]} tools present"
  exit 0
fi

echo "install-deps: missing: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "install-deps: not root and no sudo; install these as root:" >&2
    echo "  apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
