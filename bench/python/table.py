"""Reads push_cost.py's JSON lines and prints the medians per runtime as a table."""
import json
import statistics
import sys

rows = {}
for line in sys.stdin:
    r = json.loads(line)
    rows.setdefault(r["runtime"], []).append(r)
print(f"{'runtime':<11}{'push/op':>10}{'pipelined/op':>14}{'sync/op':>10}{'sync/async':>12}"
      f"{'10 dots':>10}   ({next(iter(rows.values()))[0]['cores']} cores, medians)")
for name in ["depengine", "numpy", "mxnet"]:
    if name not in rows:
        print(f"{name:<11}missing")
        continue
    m = {k: statistics.median(r[k] for r in rows[name])
         for k in ["push", "pipelined", "synchronous", "ten_dots"]}
    n = rows[name][0]["ops"]
    print(f"{name:<11}{m['push'] / n * 1e6:>8.2f}us{m['pipelined'] / n * 1e6:>12.2f}us"
          f"{m['synchronous'] / n * 1e6:>8.2f}us{m['synchronous'] / m['pipelined']:>11.1f}x"
          f"{m['ten_dots']:>9.3f}s")
