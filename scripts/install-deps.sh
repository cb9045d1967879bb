#!/usr/bin/env bash
# Installs what depengine needs from Debian's packages. Idempotent: does nothing when all
# are present. Needs root (or sudo) on a fresh machine.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libtbb-dev libboost-graph-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev graphviz
  libstarpu-dev gnuplot-nox
  dataset-fashion-mnist zlib1g-dev python3-numpy
  clang libclang-rt-14-dev
  openmpi-bin libopenmpi-dev starpu-examples
  python3-venv python3-dev ccache
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
