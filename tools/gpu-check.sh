#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and its driver: build with CUDA (or take
# the programs tools/gpu-bundle.sh built elsewhere), run the GPU tests and the engine's GPU
# scheduling tests, then the GPU benchmarks, which print one table, then the CNN from Python
# on the GPU beside PyTorch. Meant to finish in under 5 minutes.
#
#   tools/gpu-check.sh              # build in build/gpu-check (needs nvcc and the build's
#                                   # dependencies: scripts/install-deps.sh)
#   BUILD_DIR=/tmp/b tools/gpu-check.sh
#   JOBS=8 tools/gpu-check.sh
#   PREBUILT=/tmp/gpu tools/gpu-check.sh   # an unpacked tools/gpu-bundle.sh archive: no build,
#                                   # only the driver and CUDA's libraries are needed
#   CNN=0 tools/gpu-check.sh        # without the CNN step (issue 25's experiment on the GPU)
#   SANITIZE=1 tools/gpu-check.sh   # also the GPU tests under compute-sanitizer's memcheck
#   CNN_EPOCHS=3 tools/gpu-check.sh # epochs of each CNN run (default 1)
#   LOG_DIR=/tmp/logs tools/gpu-check.sh   # where logs and the table go (default: the build)
#
# The CNN step installs the Python package built with CUDA (into $BUILD_DIR/python-venv, or
# the bundle's wheel into $PREBUILT/site for PYTHON, default python3), trains
# examples/python/mnist_cnn.py --ctx gpu on CNN_LIMIT images (default 12000), and, when
# bench/peers/setup-torch.sh has made build/torch-venv (or TORCH_PY names a Python with
# torch), the same network in PyTorch on the same GPU (bench/peers/cnn_torch.py --device
# cuda). It prints both GPU utilizations: nvidia-smi's, sampled every 100 ms over each run,
# and for depengine also its own (the GPU compute lane's busy time from the profiler / wall).
# FASHION_MNIST_DIR names the folder of the IDX files (default Debian's).
#
# Every step runs even when one before it failed, each under a time limit (STEP_TIMEOUT,
# default 300 s). Exit status: 0 when everything ran and passed; 1 on a failure; 2 when no
# usable GPU was found (the tests then skip; nothing was measured).
set -uo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
build=${BUILD_DIR:-$src/build/gpu-check}
prebuilt=${PREBUILT:-}
logs=${LOG_DIR:-${prebuilt:-$build}}
jobs=${JOBS:-$(nproc)}
limit_s=${STEP_TIMEOUT:-300}
data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
export FASHION_MNIST_DIR=$data
start=$SECONDS
failed=()

step() { printf '\n=== %s (%ds)\n' "$1" $((SECONDS - start)); }
# Runs "$@" under the time limit; a failure is recorded and the check goes on.
check() {
  local rc=0
  timeout "$limit_s" "$@" || rc=$?
  if [[ $rc -ne 0 ]]; then
    [[ $rc -eq 124 ]] && echo "TIMED OUT after $limit_s s: $*"
    failed+=("$(basename "$1") (exit $rc)")
  fi
  return $rc
}
# The path of a program: the bundle's bin/, or the build folder's.
program() {
  if [[ -n $prebuilt ]]; then echo "$prebuilt/bin/$(basename "$1")"; else echo "$build/$1"; fi
}

step "GPU and toolkit"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.mem \
    --format=csv,noheader
else
  echo "nvidia-smi not found"
fi
mkdir -p "$logs"
if [[ -n $prebuilt ]]; then
  if [[ ! -x $prebuilt/bin/gpu_ops_test ]]; then
    echo "PREBUILT=$prebuilt has no bin/gpu_ops_test: unpack tools/gpu-bundle.sh's archive there" >&2
    exit 1
  fi
  # The bundle's own libraries first, then the folders holding this machine's cudart and
  # cuBLAS (the toolkit's, or the pip wheels' of a Python that has them).
  cuda_dirs=
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib; do
    if [[ -e $d/libcublas.so.13 && -e $d/libcudart.so.13 ]]; then cuda_dirs=$d; break; fi
  done
  if [[ -z $cuda_dirs ]]; then
    cuda_dirs=$(find /usr/local /opt /usr/lib -name 'libcublas.so.13*' -o -name 'libcudart.so.13*' \
      2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:)
  fi
  export LD_LIBRARY_PATH=$prebuilt/lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "prebuilt programs in $prebuilt; CUDA libraries from: ${cuda_dirs:-nowhere found}"
  if ldd "$prebuilt/bin/gpu_ops_test" | grep 'not found'; then
    echo "the bundle's programs cannot load here" >&2
    exit 1
  fi
else
  if ! command -v nvcc >/dev/null; then
    for d in /usr/local/cuda/bin /opt/cuda/bin; do
      if [[ -x $d/nvcc ]]; then export PATH=$d:$PATH; break; fi
    done
  fi
  command -v nvcc >/dev/null || { echo "nvcc not found: install the CUDA toolkit" >&2; exit 1; }
  nvcc --version | tail -1

  step "configure (cuda preset flags, tests on, benchmarks on)"
  # Release code with CUDA required; 80 and 90 are always built, so the binaries also run
  # on A100/H100-class GPUs.
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDEPENGINE_ENABLE_CUDA=ON -DDEPENGINE_BUILD_TESTS=ON -DDEPENGINE_BUILD_BENCH=ON >/dev/null ||
    exit 1
  grep -q '^#define DEPENGINE_HAS_CUDA 1' "$build/engine/generated/include/depengine/config.h" ||
    exit 1

  step "build"
  cmake --build "$build" -j "$jobs" --target gpu_ops_test engine_device_test \
    engine_gpu_scheduling_test frontend_gpu_ndarray_test frontend_cnn_test frontend_optim_test \
    frontend_record_test depengine_gpu_bench || exit 1
fi

step "device count"
count=$("$(program bench/gpu/depengine_gpu_bench)" --count)
echo "Device::gpu_count() = $count"
if [[ $count -eq 0 ]]; then
  echo "no usable CUDA device: the GPU tests skip and nothing can be measured" >&2
  "$(program tests/gpu/gpu_ops_test)" --gtest_filter='GpuRuntime.*' || true
  exit 2
fi

step "GPU tests (kernels vs CPU, on gpu(0))"
check "$(program tests/gpu/gpu_ops_test)" --gtest_brief=1

step "GPU arrays, the CNN's ops, optimizers and recorded segments on CUDA devices (and simulated)"
for t in frontend_gpu_ndarray_test frontend_cnn_test frontend_optim_test frontend_record_test; do
  echo "--- $t"
  check "$(program "tests/frontend/$t")" --gtest_brief=1
done

step "GPU scheduling tests (simulated device; the same paths as CUDA)"
check "$(program tests/engine/engine_device_test)" --gtest_brief=1
check "$(program tests/engine/engine_gpu_scheduling_test)" --gtest_brief=1

step "GPU benchmarks"
bench_args=()
if [[ ${QUICK:-0} == 1 ]]; then bench_args+=(--quick); fi
check "$(program bench/gpu/depengine_gpu_bench)" "${bench_args[@]}" >"$logs/gpu-check-table.txt" 2>&1
cat "$logs/gpu-check-table.txt"

if [[ ${CNN:-1} != 0 ]]; then
  step "the CNN on the GPU (issue 25): depengine from Python beside PyTorch"
  limit=${CNN_LIMIT:-12000}
  if [[ -n $prebuilt ]]; then
    py=${PYTHON:-python3}
    "$py" -m pip install -q --no-index --no-deps --no-compile --upgrade \
      --target "$prebuilt/site" "$prebuilt"/wheel/*.whl || exit 1
    export PYTHONPATH=$prebuilt/site${PYTHONPATH:+:$PYTHONPATH}
  else
    venv=$build/python-venv
    python3 -m venv "$venv"
    CMAKE_BUILD_PARALLEL_LEVEL=$jobs "$venv/bin/python" -m pip install -q "$src" \
      -Ccmake.define.DEPENGINE_ENABLE_CUDA=ON || exit 1
    py=$venv/bin/python
  fi
  # Runs "$@" with its output in $1's log while nvidia-smi samples GPU 0's utilization every
  # 100 ms; prints the mean of the samples from the first non-zero one to the last (the
  # process's start, imports and data loading, and its exit, leave the GPU idle).
  sampled() {
    local log=$1 samples
    shift
    samples=$(mktemp)
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -i 0 -lms 100 \
      >"$samples" 2>/dev/null &
    local sampler=$!
    local rc=0
    timeout "$limit_s" "$@" >"$log" 2>&1 || rc=$?
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    awk '$1 ~ /^[0-9]+$/ {v[n++] = $1}
         END {f = 0; while (f < n && v[f] == 0) f++; l = n - 1; while (l > f && v[l] == 0) l--
              if (f >= n) {printf "0%% (no sample above 0)"; exit}
              for (i = f; i <= l; i++) s += v[i]
              printf "%.1f%% over %d samples", s / (l - f + 1), l - f + 1}' "$samples"
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
  for mode in eager hybridized; do
    dep_log=$logs/cnn-depengine-$mode.log
    flags=()
    [[ $mode == hybridized ]] && flags+=(--hybridize)
    if dep_smi=$(sampled "$dep_log" "$py" "$src/examples/python/mnist_cnn.py" --ctx gpu \
      --limit "$limit" --test-limit 2000 --epochs "${CNN_EPOCHS:-1}" --data "$data" "${flags[@]}"); then
      echo "depengine (Python, gluon $mode, gpu(0)): $(result "$dep_log"); nvidia-smi GPU utilization $dep_smi"
    else
      echo "mnist_cnn.py --ctx gpu ${flags[*]} failed:" >&2
      tail -5 "$dep_log" >&2
      failed+=("mnist_cnn.py $mode")
    fi
  done
  tpy=${TORCH_PY:-${TORCH_VENV:-$src/build/torch-venv}/bin/python}
  if command -v "$tpy" >/dev/null; then
    torch_log=$logs/cnn-torch.log
    # A peer that cannot run here is reported, not a failure of the check.
    if torch_smi=$(sampled "$torch_log" "$tpy" "$src/bench/peers/cnn_torch.py" --device cuda \
      --limit "$limit" --test-limit 2000 --epochs "${CNN_EPOCHS:-1}"); then
      echo "PyTorch eager (cuda:0): $(result "$torch_log" | sed 's/, process CPU.*//'); nvidia-smi GPU utilization $torch_smi"
    else
      echo "PyTorch eager (cuda:0) did not run: $(tail -1 "$torch_log")"
    fi
  else
    echo "PyTorch: no Python at $tpy (bash bench/peers/setup-torch.sh, or TORCH_PY=)"
  fi
  echo "logs in $logs"
fi

if [[ ${SANITIZE:-0} == 1 ]]; then
  step "GPU tests under compute-sanitizer (memcheck)"
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [[ -n $sanitizer ]]; then
    for t in tests/gpu/gpu_ops_test tests/frontend/frontend_cnn_test; do
      check "$sanitizer" --tool memcheck --error-exitcode 1 "$(program "$t")" --gtest_brief=1 \
        --gtest_filter='GpuOps.*:*Cuda*' >"$logs/memcheck-$(basename "$t").log" 2>&1
      tail -2 "$logs/memcheck-$(basename "$t").log"
    done
  else
    echo "compute-sanitizer not found"
  fi
fi

step "done"
echo "table saved to $logs/gpu-check-table.txt; total $((SECONDS - start)) s"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
