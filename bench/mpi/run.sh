#!/usr/bin/env bash
# Distributed benchmarks, side by side in one run (docs/distributed.md quotes its output):
#   1. tiled Cholesky, 4 ranks (2x2 block-cyclic), N=3840, 12x12 tiles: depengine::dist's
#      dist_cholesky beside StarPU-MPI's mpi_cholesky (Debian's starpu-examples), one CPU
#      worker per rank for both, single-threaded BLAS; GFlop/s medians of REPEAT runs each,
#      alternating; the first of ours also checks the residual and the message count.
#   2. the stencil under an injected per-message latency: overlap vs bulk-synchronous, 2 ranks.
#   3. CPU time of waiting ranks (dist_idle), 4 ranks.
# Usage: bench/mpi/run.sh [BUILD_DIR (build/release)]   env: REPEAT (3), N (3840), NB (12)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/release}
repeat=${REPEAT:-3}
n=${N:-3840}
nb=${NB:-12}
starpu=/usr/lib/x86_64-linux-gnu/starpu/mpi/mpi_cholesky
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
for exe in "$build/examples/mpi/dist_cholesky" "$build/examples/mpi/dist_stencil" \
           "$build/examples/mpi/dist_idle" "$starpu"; do
  [[ -x $exe ]] || { echo "run.sh: $exe is missing (build the MPI examples, examples/mpi; scripts/install-deps.sh installs starpu-examples)" >&2; exit 1; }
done
mpi=(mpirun --oversubscribe)
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "== Cholesky N=$n, ${nb}x${nb} tiles, 4 ranks (2x2), 1 worker per rank =="
ours=() theirs=()
for ((i = 0; i < repeat; i++)); do
  check=(); ((i == 0)) && check=(-check)
  out=$(DEPENGINE_CPU_THREADS=1 "${mpi[@]}" -np 4 -x DEPENGINE_CPU_THREADS -x OPENBLAS_NUM_THREADS \
        "$build/examples/mpi/dist_cholesky" -size "$n" -nblocks "$nb" -p 2 "${check[@]}")
  echo "$out"
  ours+=("$(grep -o '[0-9.]* GFlop/s' <<<"$out" | cut -d' ' -f1)")
  out=$(STARPU_NCPU=1 STARPU_SILENT=1 "${mpi[@]}" -np 4 -x STARPU_NCPU -x STARPU_SILENT -x OPENBLAS_NUM_THREADS \
        "$starpu" -size "$n" -nblocks "$nb" 2>&1 | grep -E 'GFlop|Computation time')
  echo "starpu mpi_cholesky: $(tr '\n' ' ' <<<"$out")"
  theirs+=("$(grep -o 'GFlops : [0-9.]*' <<<"$out" | awk '{print $3}')")
done
m_ours=$(printf '%s\n' "${ours[@]}" | median)
m_theirs=$(printf '%s\n' "${theirs[@]}" | median)
echo "cholesky median GFlop/s: depengine::dist $m_ours, StarPU-MPI $m_theirs, ratio $(awk -v a="$m_ours" -v b="$m_theirs" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}')x"

echo "== Stencil, 2 ranks, 1 worker per rank, rows 1024 x cols 2048 per rank, 50 steps =="
for lat in 0 1000; do
  for mode in overlap bsp; do
    vals=() comps=()
    for ((i = 0; i < repeat; i++)); do
      out=$(DEPENGINE_CPU_THREADS=1 "${mpi[@]}" -np 2 -x DEPENGINE_CPU_THREADS \
            "$build/examples/mpi/dist_stencil" -mode "$mode" -latency "$lat" -steps 50)
      vals+=("$(grep -o ': [0-9.]* ms/step' <<<"$out" | awk '{print $2}')")
      comps+=("$(grep -o 'rank 0 [0-9.]* ms/step' <<<"$out" | awk '{print $3}')")
    done
    echo "stencil latency ${lat} us, $mode: median $(printf '%s\n' "${vals[@]}" | median) ms/step (runs: ${vals[*]}), compute inside the ops on rank 0: median $(printf '%s\n' "${comps[@]}" | median) ms/step"
  done
done

echo "== Waiting ranks' CPU (rank 0 computes 2 s; the others wait with a receive outstanding) =="
"${mpi[@]}" -np 4 "$build/examples/mpi/dist_idle" -seconds 2
