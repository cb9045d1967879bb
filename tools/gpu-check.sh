#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU, its driver and the CUDA toolkit (nvcc,
# cuBLAS): configure and build with CUDA, run the GPU tests and the engine's GPU scheduling
# tests, then the GPU benchmarks, which print one table. Meant to finish in under 5 minutes.
#
#   tools/gpu-check.sh              # build in build/gpu-check
#   BUILD_DIR=/tmp/b tools/gpu-check.sh
#   JOBS=8 tools/gpu-check.sh
#
# Exit status: 0 when everything ran and passed; 1 on a failure; 2 when no usable GPU was
# found (the tests then skip; nothing was measured).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
build=${BUILD_DIR:-$src/build/gpu-check}
jobs=${JOBS:-$(nproc)}
start=$SECONDS

step() { printf '\n=== %s (%ds)\n' "$1" $((SECONDS - start)); }

step "GPU and toolkit"
if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /opt/cuda/bin; do
    if [[ -x $d/nvcc ]]; then export PATH=$d:$PATH; break; fi
  done
fi
command -v nvcc >/dev/null || { echo "nvcc not found: install the CUDA toolkit" >&2; exit 1; }
nvcc --version | tail -1
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
else
  echo "nvidia-smi not found"
fi

step "configure (cuda preset flags, tests on, benchmarks on)"
# Release code with CUDA required; the build machine's architectures come first (80 and
# 90 are always built, so the binaries also run on A100/H100-class GPUs).
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDEPENGINE_ENABLE_CUDA=ON -DDEPENGINE_BUILD_TESTS=ON -DDEPENGINE_BUILD_BENCH=ON >/dev/null
grep -q '^#define DEPENGINE_HAS_CUDA 1' "$build/engine/generated/include/depengine/config.h"

step "build"
cmake --build "$build" -j "$jobs" --target gpu_ops_test engine_device_test \
  engine_gpu_scheduling_test frontend_gpu_ndarray_test depengine_gpu_bench

step "device count"
count=$("$build/bench/gpu/depengine_gpu_bench" --count)
echo "Device::gpu_count() = $count"
if [[ $count -eq 0 ]]; then
  echo "no usable CUDA device: the GPU tests skip and nothing can be measured" >&2
  "$build/tests/gpu/gpu_ops_test" --gtest_filter='GpuRuntime.*' || true
  exit 2
fi

step "GPU tests (kernels vs CPU, on gpu(0))"
"$build/tests/gpu/gpu_ops_test" --gtest_brief=1

step "GPU arrays (NDArray on CUDA devices and on the simulated device)"
"$build/tests/frontend/frontend_gpu_ndarray_test" --gtest_brief=1

step "GPU scheduling tests (simulated device; the same paths as CUDA)"
"$build/tests/engine/engine_device_test" --gtest_brief=1
"$build/tests/engine/engine_gpu_scheduling_test" --gtest_brief=1

step "GPU benchmarks"
bench_args=()
if [[ ${QUICK:-0} == 1 ]]; then bench_args+=(--quick); fi
"$build/bench/gpu/depengine_gpu_bench" "${bench_args[@]}" | tee "$build/gpu-check-table.txt"

step "done"
echo "table saved to $build/gpu-check-table.txt; total $((SECONDS - start)) s"
