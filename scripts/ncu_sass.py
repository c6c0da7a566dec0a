#!/usr/bin/env python3
"""Where one profiled kernel spends its issue slots, from the SASS page of an Nsight Compute report
made with `--section WarpStateStats --section SourceCounters` (used by scripts/gpu-moe.sh):

    ncu -i REP.ncu-rep --page source --csv --print-source sass > FILE.csv
    scripts/ncu_sass.py FILE.csv [N]

Prints the stall reasons over all samples, the executed instruction mix by opcode, and the N
instructions with the most stall samples (address, SASS, samples, executions, top two reasons).
"""
import collections
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(sass):
    words = sass.split()
    if not words:
        return ""
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    top_n = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    head_at = next((i for i, r in enumerate(rows) if "Source" in r and "Address" in r), None)
    if head_at is None:
        print("ncu_sass: no SASS rows (was the report made with --section SourceCounters?)")
        return
    head, data = rows[head_at], rows[head_at + 1:]
    col = {name: i for i, name in enumerate(head)}
    stalls = [n for n in head if n.startswith("stall_") and "Not Issued" not in n]
    samples_col, executed_col = col["Warp Stall Sampling (All Samples)"], col["Instructions Executed"]

    by_reason = collections.Counter()
    mix = collections.Counter()
    for r in data:
        for n in stalls:
            by_reason[n] += number(r[col[n]])
        mix[opcode(r[col["Source"]].strip())] += number(r[executed_col])
    samples, executed = sum(by_reason.values()), sum(mix.values())
    if samples == 0 or executed == 0:
        print("ncu_sass: no samples")
        return
    print(f"stall samples {samples:.0f}: " +
          ", ".join(f"{n[6:]} {v / samples * 100:.1f}%" for n, v in by_reason.most_common(8)))
    print(f"warp instructions executed {executed:.0f}: " +
          ", ".join(f"{n} {v / executed * 100:.1f}%" for n, v in mix.most_common(10)))
    for r in sorted(data, key=lambda r: -number(r[samples_col]))[:top_n]:
        reasons = sorted(((number(r[col[n]]), n[6:]) for n in stalls), reverse=True)[:2]
        print(f"  {r[col['Address']][-5:]}  {r[col['Source']].strip()[:56]:56s} samples {number(r[samples_col]):7.0f}"
              f"  executed {number(r[executed_col]):9.0f}  " + ", ".join(f"{n} {v:.0f}" for v, n in reasons))


if __name__ == "__main__":
    main()
