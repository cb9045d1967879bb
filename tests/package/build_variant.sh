#!/usr/bin/env bash
# Builds only the installed libraries of the other kind (static when the tree is shared, and
# the reverse), for check_package.sh: no tests, benchmarks, tools or CUDA, and no
# optimization, so that it costs about a minute on 2 cores rather than a second full build.
# The build folder is kept, so a rerun only rebuilds what changed.
#   build_variant.sh BUILD_DIR SOURCE_DIR SHARED(ON|OFF) GENERATOR CXX_COMPILER
set -euo pipefail
build=$1
src=$2
shared=$3
generator=$4
cxx=$5
cmake -S "$src" -B "$build" -G "$generator" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE= \
  -DDEPENGINE_SHARED_LIBS="$shared" -DDEPENGINE_ENABLE_CUDA=OFF -DDEPENGINE_BUILD_TESTS=OFF \
  -DDEPENGINE_BUILD_BENCH=OFF -DDEPENGINE_BUILD_TOOLS=OFF -DDEPENGINE_BUILD_EXAMPLES=OFF >/dev/null
# With the programs off, everything left is a library (depengine_dist too, where MPI is found).
cmake --build "$build" --parallel 2
