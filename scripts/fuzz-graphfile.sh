#!/usr/bin/env bash
# Builds the graph-file loader's libFuzzer target with clang (ASan + UBSan) and runs it for
# a bounded time, starting from the seed corpus in tests/inspect/fuzz_corpus.
#   scripts/fuzz-graphfile.sh [SECONDS]      (default 30; CI runs it as is)
# DEPENGINE_FUZZ_SEED picks the mutation seed (default 1, so CI runs are repeatable).
# Exit status: 0 when the fuzzer found nothing; otherwise the crashing input is left in the
# build folder (crash-*) and printed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-30}
build=${DEPENGINE_FUZZ_BUILD:-$root/build/fuzz}

if ! command -v clang++ > /dev/null; then
  echo "fuzz-graphfile: clang++ is missing (scripts/install-deps.sh installs clang)" >&2
  exit 1
fi
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DDEPENGINE_BUILD_FUZZERS=ON \
  -DDEPENGINE_BUILD_TESTS=OFF -DDEPENGINE_BUILD_BENCH=OFF -DDEPENGINE_ENABLE_CUDA=OFF \
  "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link $sanitize" \
  "-DCMAKE_EXE_LINKER_FLAGS=$sanitize" > "$build.configure.log" 2>&1 ||
  { cat "$build.configure.log" >&2; exit 1; }
cmake --build "$build" --target graphfile_fuzzer -j2

# New inputs go to a scratch corpus; the checked-in seeds are only read.
corpus="$build/fuzz-corpus"
mkdir -p "$corpus"
cd "$build"
"$build/workloads/graphfile_fuzzer" -seed="${DEPENGINE_FUZZ_SEED:-1}" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
  -print_final_stats=1 "$corpus" "$root/tests/inspect/fuzz_corpus"
