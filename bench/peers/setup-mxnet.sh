#!/usr/bin/env bash
# Creates build/mxnet-venv, a Python virtual environment holding Apache MXNet 1.9.1 (CPU wheel
# from PyPI) and a NumPy it works with, for bench/peers/mlp_mxnet.py:
#
#   bash bench/peers/setup-mxnet.sh
#   build/mxnet-venv/bin/python bench/peers/mlp_mxnet.py --epochs 3
#
# Idempotent: does nothing when the venv already imports mxnet 1.9.1. When PyPI cannot be
# reached, the wheel does not install or MXNet does not load (a missing system library, say),
# it prints one line starting "mxnet: missing" with the reason, removes what it made and
# exits 0, so callers can report the peer as missing. MXNET_VENV overrides the folder.
#
# Pins: mxnet 1.9.1 uses np.bool, removed in NumPy 1.24, hence numpy 1.23.5 (which has wheels
# for Python 3.8 to 3.11; MXNet 1.9.1's wheel is py3-none, it loads through ctypes).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 0
venv=${MXNET_VENV:-build/mxnet-venv}
MXNET_PIN=mxnet==1.9.1
NUMPY_PIN=numpy==1.23.5

probe='import mxnet, numpy; assert mxnet.__version__ == "1.9.1", mxnet.__version__; print(mxnet.__version__, numpy.__version__)'

if [[ -x $venv/bin/python ]] && got=$("$venv/bin/python" -c "$probe" 2>/dev/null); then
  read -r mx np <<<"$got"
  echo "mxnet: present ($venv, mxnet $mx, numpy $np, $("$venv/bin/python" -V 2>&1))"
  exit 0
fi

missing() {
  echo "mxnet: missing ($*)"
  rm -rf "$venv"
  exit 0
}

# A Python with a working venv module (Debian's python3 needs python3-venv for ensurepip).
py=
for cand in /usr/bin/python3 "$(command -v python3 2>/dev/null)"; do
  [[ -n $cand && -x $cand ]] || continue
  if "$cand" -c 'import sys, venv, ensurepip; assert sys.version_info >= (3, 8) and sys.version_info < (3, 12)' \
      2>/dev/null; then
    py=$cand
    break
  fi
done
[[ -n $py ]] || missing "no python3 3.8-3.11 with the venv/ensurepip modules; install python3-venv"

log=$(mktemp "${TMPDIR:-/tmp}/setup-mxnet.XXXXXX.log")
trap 'rm -f "$log"' EXIT

rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$py" -m venv "$venv" >"$log" 2>&1 ||
  missing "$py -m venv failed: $(tail -n 1 "$log")"

echo "setup-mxnet: installing $MXNET_PIN $NUMPY_PIN into $venv with $("$py" -V 2>&1) ($py)"
if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input \
    "$MXNET_PIN" "$NUMPY_PIN" >"$log" 2>&1; then
  why=$(grep -E -m 1 'ERROR|Could not|Failed|No matching|Network|Connection|Temporary failure' "$log")
  missing "pip install $MXNET_PIN $NUMPY_PIN failed: ${why:-$(tail -n 1 "$log")}"
fi

# MXNet loads libmxnet.so through ctypes; name any shared library the loader cannot find.
if ! "$venv/bin/python" -c "$probe" >"$log" 2>&1; then
  lib=$(find "$venv" -name libmxnet.so -print -quit)
  libs=
  if [[ -n $lib ]]; then
    libs=$(ldd "$lib" 2>/dev/null | awk '/not found/ {print $1}' | sort -u | paste -sd ' ' -)
  fi
  [[ -n $libs ]] || libs=$(grep -o -E 'lib[A-Za-z0-9_+.-]+\.so[0-9.]*: cannot open' "$log" | sed 's/: cannot open//' | sort -u | paste -sd ' ' -)
  if [[ -n $libs ]]; then
    missing "installed but libmxnet.so needs system libraries not found: $libs (e.g. apt-get install libgfortran5 libquadmath0 libgomp1)"
  fi
  missing "installed but 'import mxnet' fails: $(tail -n 1 "$log")"
fi

echo "mxnet: installed ($venv, $("$venv/bin/python" -c "$probe"), $("$venv/bin/python" -V 2>&1))"
