#!/usr/bin/env bash
# The stencil's two versions (overlap, bsp) give the same checksum, with and without an
# injected latency, on 3 ranks. Usage: stencil_test.sh DIST_STENCIL MPIEXEC
set -euo pipefail
stencil=$1 mpiexec=$2
sums=()
for mode in overlap bsp; do
  for lat in 0 300; do
    out=$("$mpiexec" -np 3 --oversubscribe "$stencil" -mode "$mode" -rows 40 -cols 64 -steps 7 -latency "$lat")
    echo "$out"
    sums+=("$(grep -o 'checksum [0-9.e+-]*' <<<"$out")")
  done
done
for s in "${sums[@]}"; do [[ $s == "${sums[0]}" ]] || { echo "checksums differ: ${sums[*]}"; exit 1; }; done
echo "stencil_test: ok (${sums[0]})"
