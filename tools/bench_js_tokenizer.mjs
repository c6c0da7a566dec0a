// Single-threaded encode throughput of @lenml/tokenizers (node) on a text file, split into
// documents exactly like `pagellm tokenize --bench-file` does (cut at the first newline past 2 KB).
//
//   node tools/bench_js_tokenizer.mjs assets/tokenizers/qwen3 FILE [--repeat 3] [--add-special-tokens]
import fs from "node:fs";
import path from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";

const args = process.argv.slice(2);
const [dir, file] = args;
const repeat = args.includes("--repeat") ? Number(args[args.indexOf("--repeat") + 1]) : 3;
const addSpecial = args.includes("--add-special-tokens");
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
});
const bytes = fs.readFileSync(file);
// Split on byte offsets (as the C++ side does), then decode each document.
const docs = [];
let start = 0;
while (start < bytes.length) {
  let end = bytes.indexOf(0x0a, Math.min(bytes.length, start + 2048));
  end = end < 0 ? bytes.length : end + 1;
  docs.push(bytes.subarray(start, end).toString("utf8"));
  start = end;
}
let best = Infinity;
let tokens = 0;
for (let r = 0; r < repeat; r++) {
  tokens = 0;
  const t0 = process.hrtime.bigint();
  for (const d of docs) tokens += tokenizer.encode(d, { add_special_tokens: addSpecial }).length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  best = Math.min(best, s);
}
console.log(JSON.stringify({ bytes: bytes.length, documents: docs.length, tokens, seconds: +best.toFixed(3),
  mb_per_s: +(bytes.length / 1e6 / best).toFixed(2), tokens_per_s: Math.round(tokens / best), threads: 1, repeat }));
