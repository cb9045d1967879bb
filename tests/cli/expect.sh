#!/bin/sh
# Runs one `depengine` command line and checks how it ends (issue 11, item 14).
#   expect.sh [OPTIONS] CODE STDERR_REGEX COMMAND [ARGS...]
# Passes when COMMAND exits with CODE and writes exactly one line to stderr, matching
# STDERR_REGEX (grep -E). COMMAND runs in a fresh scratch directory, removed afterwards,
# so relative paths in ARGS name files the options made there. Options:
#   --file NAME TEXT       write TEXT to NAME first
#   --mkdir NAME           make the directory NAME first
#   --fifo NAME            make the FIFO NAME first (nothing ever writes to it)
#   --env VAR=VALUE        run COMMAND with VAR set
#   --stdout PATH          send COMMAND's stdout to PATH (e.g. /dev/full)
#   --stdout-lacks REGEX   fail when COMMAND's stdout matches REGEX (e.g. proof that no op ran)
#   --missing NAME         fail when NAME exists afterwards (nothing was left behind)
set -u
scratch=$(mktemp -d "${TMPDIR:-/tmp}/depengine_cli.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT
stdout_to="" stdout_lacks="" missing=""
while [ $# -gt 0 ]; do
  case "$1" in
    --file) printf '%s' "$3" > "$scratch/$2"; shift 3 ;;
    --mkdir) mkdir -p "$scratch/$2"; shift 2 ;;
    --fifo) mkfifo "$scratch/$2"; shift 2 ;;
    --env) export "$2"; shift 2 ;;
    --stdout) stdout_to=$2; shift 2 ;;
    --stdout-lacks) stdout_lacks=$2; shift 2 ;;
    --missing) missing=$2; shift 2 ;;
    *) break ;;
  esac
done
want_code=$1 want_err=$2
shift 2
cd "$scratch" || exit 1
if [ -n "$stdout_to" ]; then
  "$@" > "$stdout_to" 2> "$scratch/.stderr"
else
  "$@" > "$scratch/.stdout" 2> "$scratch/.stderr"
fi
code=$?
fail=0
if [ "$code" != "$want_code" ]; then
  echo "FAIL: exit code $code, expected $want_code"; fail=1
fi
lines=$(wc -l < "$scratch/.stderr")
if [ "$lines" != 1 ]; then
  echo "FAIL: $lines lines on stderr, expected exactly one"; fail=1
fi
if ! grep -Eq -- "$want_err" "$scratch/.stderr"; then
  echo "FAIL: stderr does not match: $want_err"; fail=1
fi
if [ -n "$stdout_lacks" ] && [ -f "$scratch/.stdout" ] && grep -Eq -- "$stdout_lacks" "$scratch/.stdout"; then
  echo "FAIL: stdout matches: $stdout_lacks"; fail=1
fi
if [ -n "$missing" ] && [ -e "$missing" ]; then
  echo "FAIL: $missing exists"; fail=1
fi
echo "--- command: $*"
echo "--- stderr:"; cat "$scratch/.stderr"
if [ -f "$scratch/.stdout" ]; then echo "--- stdout:"; head -20 "$scratch/.stdout"; fi
exit $fail
