#!/usr/bin/env bash
# All the tests on a fresh machine: installs the dependencies, then builds and runs the
# suites of the release, AddressSanitizer+UBSan and ThreadSanitizer presets, then fuzzes the
# graph-file loader for 30 s, and runs the Python package's tests (scripts/test-python.sh).
#   scripts/test.sh                 # all three
#   scripts/test.sh release         # a subset, by preset name (no fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."

presets=("$@")
if ((${#presets[@]} == 0)); then presets=(release asan tsan); fi

scripts/install-deps.sh
jobs=$(nproc)
for preset in "${presets[@]}"; do
  echo "=== ${preset}: configure and build"
  cmake --preset "${preset}" >/dev/null
  cmake --build --preset "${preset}" -j "${jobs}"
  echo "=== ${preset}: test"
  ctest --preset "${preset}" -j "${jobs}"
done
if ((${#@} == 0)); then
  scripts/test-python.sh
  echo "=== fuzz: graph-file loader, 30 s (libFuzzer, ASan+UBSan)"
  scripts/fuzz-graphfile.sh 30
fi
echo "=== all suites passed: ${presets[*]}"
