#!/usr/bin/env python3
"""Writes a large mixed text (default 12 MB) for tokenizer throughput measurements.

Deterministic: lines are built from the words, code and numbers of the oracle corpus
(tests/golden/tokenizer/corpus.json) with a seeded RNG: about 60% English/Latin-script prose,
25% other scripts (CJK, Cyrillic, Arabic, Indic...), 15% code and numbers.

    python3 tools/make_tokenizer_bench_text.py OUT_FILE [--mb 12]
"""
import argparse
import json
import os
import random
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--mb", type=float, default=12.0)
    args = parser.parse_args()
    with open(os.path.join(ROOT, "tests", "golden", "tokenizer", "corpus.json"), encoding="utf-8") as f:
        strings = json.load(f)["strings"]
    rng = random.Random(7)
    latin, other, code = [], [], []
    for s in strings:
        if len(s) > 400:
            continue
        for w in re.split(r"\s+", s):
            if not w:
                continue
            if all(ord(c) < 0x250 for c in w):
                (code if re.search(r"[{}();=<>\[\]_]|\d", w) else latin).append(w)
            else:
                other.append(w)
    english = ("the of and to in is that for it as was with be by on not he this are or his from at which "
               "but have an they you were her she there would their we him been has when who will more no if "
               "out so said what up its about into than them can only other new some could time these two may "
               "then do first any my now such like our over man me even most made after also did many before "
               "must through back years where much your way well down should because each just those people").split()
    target = int(args.mb * 1e6)
    size = 0
    with open(args.out, "w", encoding="utf-8") as f:
        while size < target:
            r = rng.random()
            if r < 0.6:
                words = [rng.choice(english) if rng.random() < 0.7 else rng.choice(latin) for _ in range(rng.randint(8, 30))]
                line = " ".join(words).capitalize() + rng.choice([".", ".", "?", "!", ":"])
            elif r < 0.85:
                line = "".join(rng.choice(other) + rng.choice(["", " ", " ", "，", "。"]) for _ in range(rng.randint(5, 25)))
            else:
                line = "    " * rng.randint(0, 3) + " ".join(rng.choice(code) for _ in range(rng.randint(3, 12)))
                line += " " + str(rng.randint(0, 10 ** rng.randint(1, 9)))
            f.write(line + "\n")
            size += len(line.encode("utf-8")) + 1
    print(f"wrote {size} bytes to {args.out}")


if __name__ == "__main__":
    main()
