// `pagellm tokenize` and `pagellm detokenize`: the tokenizer on the command line, plus a
// single-threaded encode throughput measurement (--bench-file).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::cli {
namespace {

std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& path) {
  return value_or_throw(Tokenizer::from_file(path));
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::string item;
  std::stringstream ss(text);
  while (std::getline(ss, item, ',')) {
    const auto begin = item.find_first_not_of(" \t[]");
    const auto end = item.find_last_not_of(" \t[]");
    if (begin == std::string::npos) continue;
    item = item.substr(begin, end - begin + 1);
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      throw CommandError(fmt::format("--ids: '{}' is not a token id (expected e.g. 1,2,3)", item));
    }
  }
  return ids;
}

// Encodes the file line by line (as a server would encode requests) and reports throughput.
void run_bench(const Tokenizer& tok, const std::string& path, bool add_special_tokens, int repeat) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CommandError(fmt::format("cannot open --bench-file '{}'", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  // Documents of ~1-4 KB: split at newlines past 2 KB.
  std::vector<std::string_view> docs;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', std::min(text.size(), start + 2048));
    end = end == std::string::npos ? text.size() : end + 1;
    docs.emplace_back(text.data() + start, end - start);
    start = end;
  }
  size_t num_tokens = 0;
  double best_s = 1e30;
  for (int r = 0; r < repeat; ++r) {
    num_tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& doc : docs) num_tokens += value_or_throw(tok.encode(doc, add_special_tokens)).size();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best_s = std::min(best_s, s);
  }
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("{\"bytes\": %zu, \"documents\": %zu, \"tokens\": %zu, \"seconds\": %.3f, \"mb_per_s\": %.2f, "
              "\"tokens_per_s\": %.0f, \"threads\": 1, \"repeat\": %d}\n",
              text.size(), docs.size(), num_tokens, best_s, mb / best_s,
              static_cast<double>(num_tokens) / best_s, repeat);
}

}  // namespace

void add_tokenize_commands(CLI::App& app) {
  struct Options {
    std::string tokenizer;
    std::string text;
    bool add_special_tokens = false;
    std::string bench_file;
    int repeat = 3;
    std::string ids;
    bool skip_special_tokens = false;
  };
  auto opts = std::make_shared<Options>();

  auto* tokenize = app.add_subcommand("tokenize", "Encode text into token ids (prints a JSON array)");
  tokenize->add_option("--tokenizer", opts->tokenizer, "tokenizer.json or a directory holding it")->required();
  tokenize->add_option("--text", opts->text, "text to encode");
  tokenize->add_flag("--add-special-tokens", opts->add_special_tokens,
                     "apply the post-processor (BOS/EOS template)");
  tokenize->add_option("--bench-file", opts->bench_file,
                       "measure single-threaded encode throughput over this file instead");
  tokenize->add_option("--repeat", opts->repeat, "benchmark repetitions (best is reported)")->capture_default_str();
  tokenize->callback([opts] {
    auto tok = load_tokenizer(opts->tokenizer);
    if (!opts->bench_file.empty()) {
      run_bench(*tok, opts->bench_file, opts->add_special_tokens, std::max(1, opts->repeat));
      return;
    }
    const auto ids = value_or_throw(tok->encode(opts->text, opts->add_special_tokens));
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
    std::printf("%s]\n", out.c_str());
  });

  auto* detokenize = app.add_subcommand("detokenize", "Decode token ids into text");
  detokenize->add_option("--tokenizer", opts->tokenizer, "tokenizer.json or a directory holding it")->required();
  detokenize->add_option("--ids", opts->ids, "comma-separated ids, e.g. 1,2,3")->required();
  detokenize->add_flag("--skip-special-tokens", opts->skip_special_tokens, "leave special tokens out");
  detokenize->callback([opts] {
    auto tok = load_tokenizer(opts->tokenizer);
    const std::string text = tok->decode(parse_ids(opts->ids), opts->skip_special_tokens);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
  });
}

}  // namespace pagellm::cli
