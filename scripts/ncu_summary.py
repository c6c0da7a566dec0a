#!/usr/bin/env python3
"""Summarises an `ncu --metrics gpu__time_duration.sum --print-summary per-kernel --csv` file: GPU
time per kernel name, largest first (used by scripts/gpu-check.sh).

Usage: scripts/ncu_summary.py FILE.csv "what was profiled"
"""
import collections
import csv
import sys

rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
if not rows:
    sys.exit(0)
head, data = rows[0], rows[1:]
try:
    ki, ii, ai, mi = (head.index(n) for n in ("Kernel Name", "Invocations", "Average", "Metric Name"))
except ValueError:
    print("ncu columns:", head)
    sys.exit(0)
total, count = collections.Counter(), collections.Counter()
for r in data:
    if r[mi] != "gpu__time_duration.sum":
        continue
    name = r[ki][:60]
    try:
        total[name] += float(r[ai].replace(",", "")) * int(r[ii])
        count[name] += int(r[ii])
    except ValueError:
        pass
all_ns = sum(total.values())
print(f"ncu: {sum(count.values())} kernels, {all_ns / 1e3:.1f} us of GPU time ({sys.argv[2] if len(sys.argv) > 2 else ''})")
for name, ns in total.most_common(12):
    print(f"  {ns / all_ns * 100:5.1f}%  {ns / 1e3:9.1f} us  x{count[name]:4d}  {name}")
