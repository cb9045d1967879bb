#!/bin/sh
# Runs the histogram benchmark and draws its plot:
#   bench/peers/histogram/run.sh BUILD_DIR [OUT_DIR] [depengine_histogram args...]
# writes OUT_DIR/histogram.csv (default docs/benchmarks) and OUT_DIR/histogram.png (gnuplot).
set -eu
build=${1:?usage: run.sh BUILD_DIR [OUT_DIR] [args...]}
out=${2:-docs/benchmarks}
[ $# -ge 2 ] && shift 2 || shift 1
mkdir -p "$out"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/peers/depengine_histogram" --csv "$out/histogram.csv" "$@"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
if command -v gnuplot >/dev/null; then
  gnuplot -e "csv='$out/histogram.csv'; png='$out/histogram.png'" \
    "$(dirname "$0")/histogram.gp"
  echo "run.sh: plot in $out/histogram.png"
else
  echo "run.sh: gnuplot missing (install gnuplot-nox): plot not drawn" >&2
fi
