#!/usr/bin/env python3
"""GPU time per kernel name over the last decode steps of an `ncu --metrics gpu__time_duration.sum
--csv --page raw` file (one row per launch; used by scripts/gpu-moe.sh).

A step ends with the program's last kernel (the step's sampling), so the launches between its last
N + 1 occurrences are N steps; times are per step.

Usage: scripts/ncu_steps.py FILE.csv [N]
"""
import collections
import csv
import sys

rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 3]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
head = next((r for r in rows if "Kernel Name" in r), None)
if head is None:
    print("ncu_steps: no kernel rows")
    sys.exit(0)
ki, ti = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
launches = []
for r in rows[rows.index(head) + 1:]:
    try:
        launches.append((r[ki], float(r[ti].replace(",", ""))))
    except (ValueError, IndexError):
        pass  # the units row
if not launches:
    sys.exit(0)
last = launches[-1][0]
ends = [i for i, (name, _) in enumerate(launches) if name == last]
if len(ends) < steps + 1:
    steps = len(ends) - 1
if steps < 1:
    print("ncu_steps: fewer than two steps")
    sys.exit(0)
window = launches[ends[-steps - 1] + 1:ends[-1] + 1]
lengths = [ends[-i] - ends[-i - 1] for i in range(1, steps + 1)]
total, count = collections.Counter(), collections.Counter()
for name, ns in window:
    short = name.split("(")[0][:70]
    total[short] += ns / steps
    count[short] += 1
all_ns = sum(total.values())
print(f"ncu: {len(launches)} launches; last {steps} steps of {lengths} kernels: {all_ns / 1e3:.1f} us of GPU time a step")
for name, ns in total.most_common(16):
    print(f"  {ns / all_ns * 100:5.1f}%  {ns / 1e3:8.1f} us  x{count[name] // steps:4d}  {name}")
