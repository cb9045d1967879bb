#!/usr/bin/env bash
# The main job on a fresh machine: installs the dependencies, builds the release preset and
# runs `depengine demo` (the d2l chapter 13.2 experiments), then the engine overhead table.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
build/release/tools/depengine/depengine demo
build/release/tools/depengine/depengine bench --quick
