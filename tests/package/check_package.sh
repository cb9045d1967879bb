#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds and runs a consumer through
# find_package(depengine CONFIG) and through pkg-config.
#   check_package.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

cmake --install "$build" --prefix "$scratch/prefix" >/dev/null

cmake -S "$src/tests/package/consumer" -B "$scratch/cmake" -G Ninja \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$scratch/cmake" >/dev/null
"$scratch/cmake/consumer"

libdir=$(find "$scratch/prefix" -name depengine.pc -printf '%h\n' | head -1)
export PKG_CONFIG_PATH="$libdir"
# shellcheck disable=SC2046
g++ -o "$scratch/pc_consumer" "$src/tests/package/consumer/main.cc" \
  $(pkg-config --cflags depengine) $(pkg-config --libs --static depengine)
LD_LIBRARY_PATH="$scratch/prefix/lib:${LD_LIBRARY_PATH:-}" "$scratch/pc_consumer"
echo "package check passed"
