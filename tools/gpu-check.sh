#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU, its driver and the CUDA toolkit (nvcc,
# cuBLAS): configure and build with CUDA, run the GPU tests and the engine's GPU scheduling
# tests, then the GPU benchmarks, which print one table. Meant to finish in under 5 minutes.
#
#   tools/gpu-check.sh              # build in build/gpu-check
#   BUILD_DIR=/tmp/b tools/gpu-check.sh
#   JOBS=8 tools/gpu-check.sh
#   CNN=0 tools/gpu-check.sh        # without the CNN step (issue 25's experiment on the GPU)
#
# The CNN step installs the Python package built with CUDA into $BUILD_DIR/python-venv,
# trains examples/python/mnist_cnn.py --ctx gpu on CNN_LIMIT images (default 12000), and,
# when bench/peers/setup-torch.sh has made build/torch-venv (or TORCH_VENV names one), the
# same network in PyTorch on the same GPU (bench/peers/cnn_torch.py --device cuda). It
# prints both GPU utilizations: nvidia-smi's, sampled every 100 ms over each run, and for
# depengine also its own (the GPU compute lane's busy time from the profiler / wall).
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

if [[ ${CNN:-1} != 0 ]]; then
  step "the CNN on the GPU (issue 25): depengine from Python beside PyTorch"
  limit=${CNN_LIMIT:-12000}
  venv=$build/python-venv
  python3 -m venv "$venv"
  CMAKE_BUILD_PARALLEL_LEVEL=$jobs "$venv/bin/python" -m pip install -q "$src" \
    -Ccmake.define.DEPENGINE_ENABLE_CUDA=ON
  # Runs "$@" with its output in $2's log while nvidia-smi samples GPU 0's utilization every
  # 100 ms; prints the mean of the samples.
  sampled() {
    local log=$1 samples
    shift
    samples=$(mktemp)
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -i 0 -lms 100 \
      >"$samples" 2>/dev/null &
    local sampler=$!
    local rc=0
    "$@" >"$log" 2>&1 || rc=$?
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    awk '$1 ~ /^[0-9]+$/ {s += $1; n++} END {if (n) printf "%.1f%%", s / n; else printf "n/a"}' \
      "$samples"
    rm -f "$samples"
    return $rc
  }
  # The RESULT line of a run's log, in words.
  result() {
    sed -n 's/^RESULT //p' "$1" | python3 -c 'import json, sys
r = json.load(sys.stdin)
print("%.0f examples/s, %.2f s, test acc %.2f%%, %s %.1f%%" % (r["examples_per_s"], r["wall_s"],
      100 * r["test_acc"], r["utilization_kind"], 100 * r["utilization"]))'
  }
  dep_log=$build/cnn-depengine.log
  if ! dep_smi=$(sampled "$dep_log" "$venv/bin/python" "$src/examples/python/mnist_cnn.py" \
    --ctx gpu --limit "$limit" --test-limit 2000); then
    echo "mnist_cnn.py --ctx gpu failed:" >&2
    tail -5 "$dep_log" >&2
    exit 1
  fi
  echo "depengine (Python, gluon, gpu(0)): $(result "$dep_log"); nvidia-smi GPU utilization $dep_smi"
  tpy=${TORCH_VENV:-$src/build/torch-venv}/bin/python
  if [[ -x $tpy ]]; then
    torch_log=$build/cnn-torch.log
    # A peer that cannot run here is reported, not a failure of the check.
    if torch_smi=$(sampled "$torch_log" "$tpy" "$src/bench/peers/cnn_torch.py" --device cuda \
      --limit "$limit" --test-limit 2000); then
      echo "PyTorch eager (cuda:0): $(result "$torch_log" | sed 's/, process CPU.*//'); nvidia-smi GPU utilization $torch_smi"
    else
      echo "PyTorch eager (cuda:0) did not run: $(tail -1 "$torch_log")"
    fi
  else
    echo "PyTorch: no venv at ${TORCH_VENV:-build/torch-venv} (bash bench/peers/setup-torch.sh)"
  fi
  echo "logs: $dep_log${torch_log:+, $torch_log}"
fi

step "done"
echo "table saved to $build/gpu-check-table.txt; total $((SECONDS - start)) s"
