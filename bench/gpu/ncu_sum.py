#!/usr/bin/env python3
"""ncu_sum.py — per-kernel totals from an `ncu --csv` metrics dump (time, DRAM %, SM %)."""
import collections
import csv
import sys

# the program's own output may come first (and a JSON line splits on its commas too)
rows = list(csv.reader(open(sys.argv[1])))
start = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "Metric Name" in r), None)
if start is None:
    sys.exit("no ncu rows")
hdr, rows = rows[start], [r for r in rows[start + 1:] if len(r) == len(rows[start])]
ki, mi, vi = hdr.index("Kernel Name"), hdr.index("Metric Name"), hdr.index("Metric Value")
tot, cnt = collections.defaultdict(float), collections.Counter()
pct = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows:
    k, name, v = r[ki][:48], r[mi], float(r[vi].replace(",", ""))
    if name == "gpu__time_duration.sum":
        tot[k] += v
        cnt[k] += 1
    else:
        pct[k][name.split("__")[0]].append(v)
all_us = sum(tot.values()) / 1e3
print("kernel                                            n    total_us  avg_us  share  dram%  sm%")
for k, t in sorted(tot.items(), key=lambda x: -x[1]):
    d = pct[k].get("dram", [0]); s = pct[k].get("sm", [0])
    print("%-48s %4d %10.1f %7.2f %5.1f%% %5.1f %5.1f" % (k, cnt[k], t / 1e3, t / 1e3 / cnt[k],
          100 * t / 1e3 / all_us, sum(d) / len(d), sum(s) / len(s)))
print("total %.1f us" % all_us)
