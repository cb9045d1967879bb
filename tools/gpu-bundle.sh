#!/usr/bin/env bash
# Packs what tools/gpu-check.sh runs into one archive, for a GPU machine that has the NVIDIA
# driver and CUDA's libraries (cudart, cuBLAS) but none of the build's dependencies (oneTBB,
# OpenBLAS, Boost, GoogleTest) and no way to install them: build here, run there.
#
#   tools/gpu-bundle.sh                       # writes .gpu/bundle.tar.xz
#   WHEEL_PYTHON=python3.12 tools/gpu-bundle.sh   # the wheel for that machine's Python
#   WHEEL=0 tools/gpu-bundle.sh               # without the Python package (no CNN step there)
#
# The archive holds bin/ (the GPU tests and benchmark of build/release, which must be a CUDA
# build: cmake --preset release finds nvcc), lib/ (the depengine libraries and every shared
# library they load that is neither glibc's, the compiler's runtime nor CUDA's), wheel/ (the
# Python package built with CUDA for WHEEL_PYTHON) and data/ (the first TRAIN training and
# TEST test images of Fashion-MNIST, default 12000 and 2000). On the GPU machine:
#
#   mkdir -p /tmp/gpu && tar -xJf .gpu/bundle.tar.xz -C /tmp/gpu
#   PREBUILT=/tmp/gpu tools/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
build=$src/build/release
out=$src/.gpu
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

grep -q '^#define DEPENGINE_HAS_CUDA 1' "$build/engine/generated/include/depengine/config.h" ||
  { echo "gpu-bundle: $build is not a CUDA build (cmake --preset release needs nvcc)" >&2; exit 1; }

# name -> path under the build folder; tools/gpu-check.sh runs them by name.
programs=(tests/gpu/gpu_ops_test tests/frontend/frontend_gpu_ndarray_test
  tests/frontend/frontend_cnn_test tests/frontend/frontend_optim_test
  tests/frontend/frontend_record_test tests/engine/engine_device_test
  tests/engine/engine_gpu_scheduling_test bench/gpu/depengine_gpu_bench)
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target $(for p in "${programs[@]}"; do basename "$p"; done)

mkdir -p "$stage/bin" "$stage/lib" "$stage/data"
for p in "${programs[@]}"; do strip --strip-debug -o "$stage/bin/$(basename "$p")" "$build/$p"; done

# Every library FILEs load, by the name they ask for, except those the GPU machine has
# already: the C library, the compiler's runtime (a newer one there still serves) and CUDA's
# (which must match its driver).
add_libs() {
  local skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libcuda|libcublas)'
  local listing
  listing=$(for f in "$@"; do ldd "$f"; done)
  if grep -q 'not found' <<<"$listing"; then
    echo "gpu-bundle: unresolved libraries here:" >&2
    grep 'not found' <<<"$listing" >&2
    exit 1
  fi
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<<"$listing" | sort -u |
    while read -r name path; do
      [[ $name =~ $skip || -e $stage/lib/$name ]] && continue
      strip --strip-debug -o "$stage/lib/$name" "$(readlink -f "$path")"
    done
}
add_libs "${programs[@]/#/$build/}"

# A slice of Fashion-MNIST in the IDX format the loaders read (gzip, header fixed up).
"${PYTHON:-python3}" - "${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}" \
  "$stage/data" "${TRAIN:-12000}" "${TEST:-2000}" <<'EOF'
import gzip, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
try:
    train, test = int(sys.argv[3]), int(sys.argv[4])
except ValueError:
    sys.exit(f"gpu-bundle: TRAIN and TEST must be whole numbers, got {sys.argv[3]!r}, {sys.argv[4]!r}")
if train < 1 or test < 1:
    sys.exit(f"gpu-bundle: TRAIN and TEST must be at least 1, got {train}, {test}")
for prefix, n in (("train", train), ("t10k", test)):
    for kind, ndim, item in (("images-idx3-ubyte", 3, 784), ("labels-idx1-ubyte", 1, 1)):
        name = f"{prefix}-{kind}.gz"
        try:
            with gzip.open(os.path.join(src, name), "rb") as f:
                raw = f.read()
        except OSError as e:
            sys.exit(f"gpu-bundle: {os.path.join(src, name)}: {e} (install Debian's "
                     "dataset-fashion-mnist, or set FASHION_MNIST_DIR)")
        dims = list(struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim]))
        if n > dims[0]:
            sys.exit(f"gpu-bundle: {name} has {dims[0]} items, {n} asked for")
        dims[0] = n
        body = raw[4 + 4 * ndim:4 + 4 * ndim + n * item]
        with gzip.open(os.path.join(dst, name), "wb", compresslevel=9) as f:
            f.write(raw[:4] + struct.pack(">" + "I" * ndim, *dims) + body)
EOF

if [[ ${WHEEL:-1} != 0 ]]; then
  py=${WHEEL_PYTHON:-python3}
  venv=$src/build/gpu-bundle-venv-$("$py" -c 'import sys; print("%d%d" % sys.version_info[:2])')
  [[ -x $venv/bin/python ]] || "$py" -m venv "$venv"
  mkdir -p "$stage/wheel"
  # Built in build/python/<tag> (pyproject.toml's build-dir), so a second bundle only
  # rebuilds what changed; CUDA code for the architectures of CUDA_ARCHITECTURES only.
  CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)} "$venv/bin/python" -m pip wheel -q "$src" \
    --no-deps -w "$stage/wheel" -Ccmake.define.DEPENGINE_ENABLE_CUDA=ON \
    -Ccmake.define.CMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-90}"
  # The extension links the system's libraries as the programs do (and maybe others).
  (cd "$stage" && python3 -m zipfile -e wheel/*.whl wheel/unpacked >/dev/null)
  add_libs "$stage"/wheel/unpacked/depengine/_depengine*.so
  rm -rf "$stage/wheel/unpacked"
fi

mkdir -p "$out"
tar -C "$stage" -cf - bin lib data $([[ -d $stage/wheel ]] && echo wheel) |
  xz -T "${JOBS:-$(nproc)}" -6 >"$out/bundle.tar.xz"
ls -l "$out/bundle.tar.xz"
