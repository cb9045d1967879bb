#!/usr/bin/env bash
# The Python package's tests: a fresh virtual environment, `pip install .` (which builds the
# extension from the project's CMake, see pyproject.toml), then pytest tests/python.
#   scripts/test-python.sh
# PYTHON picks the interpreter (default python3). The build folder build/python/ is kept
# between runs, so a second run only rebuilds what changed; ccache is used when present.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
venv=build/python-test-venv
rm -rf "$venv"
"$python" -m venv "$venv"
if command -v ccache >/dev/null; then
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
fi
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
echo "=== python: pip install . (builds the extension)"
"$venv/bin/python" -m pip install -q ".[test]"
echo "=== python: pytest tests/python"
# From another folder, so that `import depengine` finds the installed package, not python/.
(cd tests/python && "../../$venv/bin/python" -m pytest -q -p no:cacheprovider .)
