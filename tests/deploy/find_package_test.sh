#!/usr/bin/env bash
# The installed kvferry is usable by another project (label example): installs the Development
# component into a temp prefix, builds examples/find_package against it with
# find_package(kvferry), and runs the two programs. No root needed.
#
# usage: tests/deploy/find_package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$1
SRC=$2
WORK=$(mktemp -d -t kvferry-find-package.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

cmake --install "$BUILD" --prefix "$WORK/prefix" --component Development --strip >/dev/null
# The package must stand alone: only include/kvferry, and no path back into this tree.
if [ -n "$(find "$WORK/prefix/include" -mindepth 1 -maxdepth 1 ! -name kvferry)" ] ||
  grep -rqF "$(cd "$SRC" && pwd)" "$WORK/prefix/lib/cmake/kvferry"; then
  echo "FAIL: the installed package refers to the source tree or installs more than kvferry/"
  exit 1
fi
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$SRC/examples/find_package" -B "$WORK/build" "${GEN[@]}" "${LAUNCHER[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$WORK/prefix" >"$WORK/configure.log" ||
  { cat "$WORK/configure.log"; exit 1; }
cmake --build "$WORK/build" -j 2
"$WORK/build/transfer_loopback"
"$WORK/build/connector_embed"
echo "OK: built and ran against find_package(kvferry) from $WORK/prefix"
