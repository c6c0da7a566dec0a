#!/usr/bin/env python3
"""Where one profiled kernel spends its issue slots, from the SASS page of an Nsight Compute report
made with `--section WarpStateStats --section SourceCounters` (used by scripts/gpu-moe.sh):

    ncu -i REP.ncu-rep --page source --csv --print-source sass > FILE.csv
    scripts/ncu_sass.py FILE.csv [N]

Prints the stall reasons over all samples, the executed instruction mix by opcode, the regions of
the code (instructions run equally often: a loop body, a once-an-item epilogue) with the most stall
samples, and the N instructions with the most stall samples (address, SASS, samples, executions, top
two reasons). A report of several launches gives one table each; the first is read.
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
    head = rows[head_at]
    data = []
    for r in rows[head_at + 1:]:
        if len(r) != len(head):
            break  # the next launch's table
        data.append(r)
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
    regions = collections.defaultdict(lambda: [0.0, 0, collections.Counter(), collections.Counter()])
    for r in data:
        region = regions[r[executed_col]]
        region[0] += number(r[samples_col])
        region[1] += 1
        region[2][opcode(r[col["Source"]].strip())] += 1
        for n in stalls:
            region[3][n[6:]] += number(r[col[n]])
    total_samples = sum(region[0] for region in regions.values()) or 1.0
    for executed_each, (region_samples, count, ops, reasons) in sorted(regions.items(), key=lambda kv: -kv[1][0])[:5]:
        print(f"  region executed {executed_each} times: {count} instructions, {region_samples / total_samples * 100:.1f}% "
              f"of samples ({', '.join(f'{n} {v / max(region_samples, 1) * 100:.0f}%' for n, v in reasons.most_common(3))}); "
              + ", ".join(f"{n} {v}" for n, v in ops.most_common(6)))
    for r in sorted(data, key=lambda r: -number(r[samples_col]))[:top_n]:
        reasons = sorted(((number(r[col[n]]), n[6:]) for n in stalls), reverse=True)[:2]
        print(f"  {r[col['Address']][-5:]}  {r[col['Source']].strip()[:56]:56s} samples {number(r[samples_col]):7.0f}"
              f"  executed {number(r[executed_col]):9.0f}  " + ", ".join(f"{n} {v:.0f}" for v, n in reasons))


if __name__ == "__main__":
    main()
