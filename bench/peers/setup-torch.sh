#!/usr/bin/env bash
# Creates build/torch-venv, a Python virtual environment holding PyTorch 2.5.1 from PyPI and a
# NumPy it works with, for bench/peers/mlp_torch.py and bench/peers/cnn_torch.py:
#
#   bash bench/peers/setup-torch.sh
#   build/torch-venv/bin/python bench/peers/cnn_torch.py --limit 12000
#
# Idempotent: does nothing when the venv already imports torch 2.5.1. When PyPI cannot be
# reached, the wheels do not install or torch does not load, it prints one line starting
# "torch: missing" with the reason, removes what it made and exits 0, so callers can report the
# peer as missing. TORCH_VENV overrides the folder.
#
# Why 2.5.1: PyPI's Linux x86_64 torch wheels are CUDA builds that pull NVIDIA's libraries as
# dependencies (the CPU-only wheels live on another index, which is not reachable here). They
# run on the CPU all the same. 2.5.1 (CUDA 12.4, cuDNN 9.1) is about 3.2 GB in all, against
# 4 GB and more for 2.9 onwards; 1.13.1 is smaller (1.8 GB) but its CUDA 11.7 cannot drive the
# H200 that tools/gpu-check.sh compares on, and it predates torch 2's CPU kernels. Its CPU
# convolutions go through oneDNN, as the issue's comparison assumes.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 0
venv=${TORCH_VENV:-build/torch-venv}
TORCH_PIN=torch==2.5.1
NUMPY_PIN=numpy==1.26.4

probe='import torch, numpy; assert torch.__version__.split("+")[0] == "2.5.1", torch.__version__; torch.from_numpy(numpy.zeros(2, numpy.float32)).sum().item(); print(torch.__version__, numpy.__version__)'

if [[ -x $venv/bin/python ]] && got=$("$venv/bin/python" -c "$probe" 2>/dev/null); then
  read -r tv np <<<"$got"
  echo "torch: present ($venv, torch $tv, numpy $np, $("$venv/bin/python" -V 2>&1))"
  exit 0
fi

missing() {
  echo "torch: missing ($*)"
  rm -rf "$venv"
  exit 0
}

# A Python with a working venv module (Debian's python3 needs python3-venv for ensurepip) in
# the range torch 2.5.1 has wheels for.
py=
for cand in /usr/bin/python3 "$(command -v python3 2>/dev/null)"; do
  [[ -n $cand && -x $cand ]] || continue
  if "$cand" -c 'import sys, venv, ensurepip; assert (3, 9) <= sys.version_info[:2] <= (3, 12)' \
      2>/dev/null; then
    py=$cand
    break
  fi
done
[[ -n $py ]] || missing "no python3 3.9-3.12 with the venv/ensurepip modules; install python3-venv"

# The wheels unpack to about 6 GB; say so rather than fail half-way.
free_kb=$(df -Pk "$(dirname "$venv")" 2>/dev/null | awk 'NR == 2 {print $4}')
if [[ -n $free_kb ]] && ((free_kb < 8 * 1024 * 1024)); then
  missing "less than 8 GB free under $(dirname "$venv") for the CUDA-built wheels"
fi

log=$(mktemp "${TMPDIR:-/tmp}/setup-torch.XXXXXX.log")
trap 'rm -f "$log"' EXIT

rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$py" -m venv "$venv" >"$log" 2>&1 ||
  missing "$py -m venv failed: $(tail -n 1 "$log")"

echo "setup-torch: installing $TORCH_PIN $NUMPY_PIN into $venv with $("$py" -V 2>&1) ($py); about 3.2 GB to download"
if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input \
    "$TORCH_PIN" "$NUMPY_PIN" >"$log" 2>&1; then
  why=$(grep -E -m 1 'ERROR|Could not|Failed|No matching|Network|Connection|Temporary failure|No space' "$log")
  missing "pip install $TORCH_PIN $NUMPY_PIN failed: ${why:-$(tail -n 1 "$log")}"
fi

if ! "$venv/bin/python" -c "$probe" >"$log" 2>&1; then
  libs=$(grep -o -E 'lib[A-Za-z0-9_+.-]+\.so[0-9.]*: cannot open' "$log" | sed 's/: cannot open//' | sort -u | paste -sd ' ' -)
  [[ -z $libs ]] || missing "installed but torch needs shared libraries not found: $libs"
  missing "installed but 'import torch' fails: $(tail -n 1 "$log")"
fi

echo "torch: installed ($venv, $("$venv/bin/python" -c "$probe"), $("$venv/bin/python" -V 2>&1))"
