#!/usr/bin/env bash
# `depengine run FILE` under mpirun: a generated Cholesky graph with block-cyclic owners, the
# same graph with owners from the file, and a file with an owner outside the ranks (exit 2,
# a message naming the var). Usage: cli_test.sh DEPENGINE MPIEXEC
set -euo pipefail
depengine=$1 mpiexec=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$depengine" generate cholesky --tiles 5 --cost-us 50 -o "$dir/chol.json"

out=$("$mpiexec" -np 2 --oversubscribe "$depengine" run "$dir/chol.json" --block 2)
echo "$out"
grep -q "on 2 ranks (block-cyclic, block 2 owners)" <<<"$out"
grep -q "values equal to the sequential run: yes" <<<"$out"

# Owners from the file: every var on rank 1 but A00 (names as the generator writes them).
python3 - "$dir/chol.json" "$dir/owned.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
names = sorted({v for op in doc["ops"] for v in op["reads"] + op["writes"]})
doc["owners"] = {n: (0 if i == 0 else 1) for i, n in enumerate(names)}
json.dump(doc, open(sys.argv[2], "w"))
bad = dict(doc, owners={names[0]: 7})
json.dump(bad, open(sys.argv[2] + ".bad", "w"))
PY
out=$("$mpiexec" -np 2 --oversubscribe "$depengine" run "$dir/owned.json")
echo "$out"
grep -q "(file owners)" <<<"$out"
grep -q "values equal to the sequential run: yes" <<<"$out"

set +e
err=$("$mpiexec" -np 2 --oversubscribe "$depengine" run "$dir/owned.json.bad" 2>&1)
rc=$?
set -e
echo "$err"
[[ $rc -ne 0 ]]
grep -q "needs a rank in 0..1, got 7" <<<"$err"
echo "cli_test: ok"
