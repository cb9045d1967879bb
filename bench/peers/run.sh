#!/usr/bin/env bash
# Runs the peers benchmark (bench/peers) and publishes it: docs/benchmarks/peers.csv, the
# PNG plots in docs/benchmarks/ (gnuplot) and the generated section of docs/benchmarks.md.
#
#   bench/peers/run.sh                 # the full sweep, 3 processes, about 10 minutes on 2 cores
#   bench/peers/run.sh --quick         # under a minute; results go to the build folder only
#   bench/peers/run.sh --patterns stencil_1d,random_dag --reps 9   # any driver option
#
# Dependencies come from scripts/install-deps.sh (libtbb-dev, libstarpu-dev, gnuplot-nox).
# DEPENGINE_PEERS_BUILD overrides the build folder (default build/peers).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${DEPENGINE_PEERS_BUILD:-$root/build/peers}

quick=0
for a in "$@"; do
  [[ $a == --quick ]] && quick=1
done

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target depengine_peers

if ((quick)); then
  out=$build/peers-quick
  md=$out/benchmarks.md
  plot_dir=.
else
  out=$root/docs/benchmarks
  md=$root/docs/benchmarks.md
  plot_dir=benchmarks
fi
mkdir -p "$out"

# The sweep runs in several processes (DEPENGINE_PEERS_PASSES, default 3; 1 with --quick)
# whose runs are merged: each process has its own placement of threads on the cores, which
# on a small shared machine can shift all of one process's figures by 2-4x.
passes=${DEPENGINE_PEERS_PASSES:-3}
((quick)) && passes=1
status=0
raw=()
for ((i = 1; i <= passes; ++i)); do
  echo "run.sh: pass $i of $passes"
  "$build/bench/peers/depengine_peers" --raw-out "$build/peers_raw_$i.csv" "$@" || status=$?
  raw+=("$build/peers_raw_$i.csv")
done
files=$(IFS=,; echo "${raw[*]}")
"$build/bench/peers/depengine_peers" --raw-in "$files" --csv "$out/peers.csv" --md "$md" \
  --plot-script "$build/peers_plots.gp" --plot-dir "$plot_dir" "$@" || status=$?

if command -v gnuplot >/dev/null; then
  (cd "$out" && gnuplot "$build/peers_plots.gp")
  echo "run.sh: plots in $out"
else
  echo "run.sh: gnuplot missing (install gnuplot-nox): plots not drawn" >&2
fi
exit "$status"
