#!/usr/bin/env bash
# The main job on a fresh machine: installs the dependencies, builds the release preset and
# runs `depengine demo` (the d2l chapter 13.2 experiments), then the engine overhead table,
# then the chapter from Python (with 13.2.4's training loop) and the second source's CNN
# trained from Python and from C++ side by side.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
build/release/tools/depengine/depengine demo
build/release/tools/depengine/depengine bench --quick
# The same chapter from Python (docs/python.md): the package is built into a venv by pip. An
# install that fails (pip cannot reach PyPI for the build backend, say) is reported and the
# example skipped, so the C++ results above stand; the example itself failing fails the job.
venv=build/python-venv
if { [[ -x $venv/bin/python ]] || python3 -m venv "$venv"; } &&
   "$venv/bin/python" -m pip install -q . numpy==2.2.6; then
  (cd examples/python && "../../$venv/bin/python" d2l_async.py)
  # The second source's CNN from Python and from C++ on a short slice, side by side.
  "$venv/bin/python" examples/python/cnn_frontends.py --cli build/release/tools/depengine/depengine
else
  echo "=== python: the depengine package did not install (above); d2l_async.py skipped"
fi
