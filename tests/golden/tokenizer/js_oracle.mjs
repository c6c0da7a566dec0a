// Encodes the tokenizer corpus with @lenml/tokenizers (a JavaScript port of transformers.js's
// tokenizers, installed by scripts/setup.sh into node_modules/) and writes, per family,
// <out_dir>/js_<family>.json = {"family", "source", "ids": [[...]], "ids_special": [[...]]}
// aligned with corpus.json's "strings". test_tokenizer_oracles.cpp runs this and compares.
//
//   node tests/golden/tokenizer/js_oracle.mjs CORPUS_JSON ASSETS_TOKENIZERS_DIR OUT_DIR [FAMILY...]
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { TokenizerLoader } from "@lenml/tokenizers";

const [corpusPath, assetsDir, outDir, ...families] = process.argv.slice(2);
if (!corpusPath || !assetsDir || !outDir) {
  console.error("usage: js_oracle.mjs CORPUS_JSON ASSETS_TOKENIZERS_DIR OUT_DIR [FAMILY...]");
  process.exit(2);
}
// The package does not export package.json; find it next to the resolved entry point.
const entry = fileURLToPath(import.meta.resolve("@lenml/tokenizers"));
const version = JSON.parse(fs.readFileSync(path.join(path.dirname(entry), "..", "package.json"), "utf8")).version;
const strings = JSON.parse(fs.readFileSync(corpusPath, "utf8")).strings;
const list = families.length ? families : ["qwen3", "llama3", "gemma3", "deepseek_v3", "gptoss", "llama2"];
fs.mkdirSync(outDir, { recursive: true });
for (const family of list) {
  const dir = path.join(assetsDir, family);
  const tokenizer = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
    tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
  });
  const ids = strings.map((s) => Array.from(tokenizer.encode(s, { add_special_tokens: false })));
  const idsSpecial = strings.map((s) => Array.from(tokenizer.encode(s, { add_special_tokens: true })));
  const out = { family, source: `@lenml/tokenizers@${version} (node ${process.version})`, ids, ids_special: idsSpecial };
  fs.writeFileSync(path.join(outDir, `js_${family}.json`), JSON.stringify(out));
  console.log(`js_oracle: ${family}: ${strings.length} strings`);
}
