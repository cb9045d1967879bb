#!/usr/bin/env bash
# Side by side: the d2l chapter 13.2 loops on depengine.np, NumPy and MXNet 1.9.1, in one run.
#   bash bench/python/run.sh [--repeats 7]
# depengine and NumPy run in build/python-bench-venv (made here, `pip install .`); MXNet in
# build/mxnet-venv (bench/peers/setup-mxnet.sh; reported missing when it cannot be made).
# The three runtimes alternate, round by round (ROUNDS, default 3), and the table gives the
# median of the rounds' medians.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=build/python-bench-venv
if [[ ! -x $venv/bin/python ]]; then python3 -m venv "$venv"; fi
if command -v ccache >/dev/null; then
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
fi
"$venv/bin/python" -m pip install -q . numpy==2.2.6
bash bench/peers/setup-mxnet.sh
results=$(mktemp)
for _ in $(seq "${ROUNDS:-3}"); do
  "$venv/bin/python" bench/python/push_cost.py depengine "$@" >>"$results"
  "$venv/bin/python" bench/python/push_cost.py numpy "$@" >>"$results"
  if [[ -x build/mxnet-venv/bin/python ]]; then
    build/mxnet-venv/bin/python bench/python/push_cost.py mxnet "$@" >>"$results" 2>/dev/null
  fi
done
python3 bench/python/table.py <"$results"
rm -f "$results"
