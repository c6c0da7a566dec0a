#include "bench/dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

namespace pagellm::bench {

namespace {

// Short common words that are one token in typical BPE vocabularies: the text stand-in for
// random ids when no tokenizer can decode them.
constexpr const char* kFillerWords[] = {
    "the", "of",  "and", "to",   "in",   "is",  "it",   "you",  "that", "he",  "was",  "for",
    "on",  "are", "as",  "with", "his",  "they", "at",  "be",   "this", "have", "from", "or",
    "one", "had", "by",  "word", "but",  "not", "what", "all",  "were", "we",  "when", "your",
    "can", "said", "there", "use", "an", "each", "which", "she", "do",  "how", "their", "if"};
constexpr int kNumFillerWords = sizeof(kFillerWords) / sizeof(kFillerWords[0]);

// vLLM: randint(int(len·(1−r)), int(len·(1+r)) + 1), never below 1.
int draw_length(int len, double range_ratio, std::mt19937_64& rng) {
  int low = std::max(1, static_cast<int>(len * (1.0 - range_ratio)));
  int high = std::max(low, static_cast<int>(len * (1.0 + range_ratio)));
  return std::uniform_int_distribution<int>(low, high)(rng);
}

std::string filler_text(const std::vector<int32_t>& ids) {
  std::string text;
  for (int32_t id : ids) {
    if (!text.empty()) text.push_back(' ');
    text += kFillerWords[id % kNumFillerWords];
  }
  return text;
}

}  // namespace

Expected<Dataset> make_random_dataset(const RandomDatasetOptions& options,
                                      const BenchTokenizer* tokenizer) {
  if (options.num_prompts < 1) return invalid_argument("[bench] --num-prompts must be ≥ 1");
  if (options.input_len < 1 || options.output_len < 1) {
    return invalid_argument("[bench] --random-input-len and --random-output-len must be ≥ 1");
  }
  if (options.range_ratio < 0.0 || options.range_ratio >= 1.0) {
    return invalid_argument("[bench] --random-range-ratio must be in [0, 1), got {}",
                            options.range_ratio);
  }
  int vocab_size = options.vocab_size > 0                  ? options.vocab_size
                   : tokenizer != nullptr                  ? tokenizer->vocab_size()
                                                           : kDefaultRandomVocabSize;
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<int32_t> draw_id(0, vocab_size - 1);
  Dataset dataset;
  for (int i = 0; i < options.num_prompts; ++i) {
    BenchRequest request;
    request.prompt_len = draw_length(options.input_len, options.range_ratio, rng);
    request.output_len = draw_length(options.output_len, options.range_ratio, rng);
    std::vector<int32_t> ids(request.prompt_len);
    for (int32_t& id : ids) id = draw_id(rng);
    if (!options.as_text) {
      request.prompt_token_ids = std::move(ids);
    } else if (tokenizer != nullptr) {
      request.prompt_text = tokenizer->decode(ids);
    } else {
      request.prompt_text = filler_text(ids);
    }
    dataset.requests.push_back(std::move(request));
  }
  if (options.as_text && tokenizer == nullptr) {
    dataset.notes.push_back(
        "random prompts sent as text without --tokenizer: one common English word per token, so "
        "prompt lengths are approximate");
  }
  return dataset;
}

Expected<Dataset> make_mixed_dataset(const MixedDatasetOptions& options, const BenchTokenizer* tokenizer) {
  const int num_classes = static_cast<int>(options.input_lens.size());
  if (num_classes == 0) return invalid_argument("[bench] --mixed-input-lens needs at least one length");
  if (options.random.num_prompts < num_classes)
    return invalid_argument("[bench] --dataset mixed needs --num-prompts ≥ {} (one per class), got {}", num_classes,
                            options.random.num_prompts);
  // Class c gets every num_classes-th request of the order, then the order is shuffled.
  std::vector<int> classes(static_cast<size_t>(options.random.num_prompts));
  for (size_t i = 0; i < classes.size(); ++i) classes[i] = static_cast<int>(i % static_cast<size_t>(num_classes));
  std::mt19937_64 rng(options.random.seed);
  std::shuffle(classes.begin(), classes.end(), rng);
  std::vector<Dataset> per_class;
  for (int c = 0; c < num_classes; ++c) {
    RandomDatasetOptions random = options.random;
    random.input_len = options.input_lens[static_cast<size_t>(c)];
    random.num_prompts = static_cast<int>(std::count(classes.begin(), classes.end(), c));
    random.seed = options.random.seed + 1 + static_cast<uint64_t>(c);
    PAGELLM_ASSIGN_OR_RETURN(Dataset d, make_random_dataset(random, tokenizer));
    per_class.push_back(std::move(d));
  }
  Dataset dataset;
  std::vector<size_t> taken(static_cast<size_t>(num_classes), 0);
  for (int c : classes) {
    BenchRequest request = std::move(per_class[static_cast<size_t>(c)].requests[taken[static_cast<size_t>(c)]++]);
    request.input_class = options.input_lens[static_cast<size_t>(c)];
    dataset.requests.push_back(std::move(request));
  }
  dataset.notes = std::move(per_class.front().notes);
  return dataset;
}

bool is_valid_sharegpt_pair(int prompt_len, int output_len, bool skip_output_len_check) {
  if (prompt_len < kShareGptMinTokens) return false;
  if (!skip_output_len_check && output_len < kShareGptMinTokens) return false;
  if (prompt_len > kShareGptMaxPromptTokens) return false;
  return prompt_len + output_len <= kShareGptMaxTotalTokens;
}

namespace {

Expected<nlohmann::json> read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("[bench] cannot open dataset file '{}'", path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json parsed = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return invalid_argument("[bench] '{}' is not valid JSON", path);
  return parsed;
}

// (prompt, completion) of one ShareGPT entry, or nothing when it has fewer than two turns.
std::optional<std::pair<std::string, std::string>> first_two_turns(const nlohmann::json& entry) {
  if (!entry.is_object() || !entry.contains("conversations")) return std::nullopt;
  const nlohmann::json& turns = entry["conversations"];
  if (!turns.is_array() || turns.size() < 2) return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    if (!turns[i].is_object() || !turns[i].contains("value") || !turns[i]["value"].is_string()) {
      return std::nullopt;
    }
  }
  return std::make_pair(turns[0]["value"].get<std::string>(), turns[1]["value"].get<std::string>());
}

}  // namespace

Expected<Dataset> load_sharegpt_dataset(const ShareGptOptions& options,
                                        const BenchTokenizer* tokenizer) {
  if (options.num_prompts < 1) return invalid_argument("[bench] --num-prompts must be ≥ 1");
  if (options.path.empty()) return invalid_argument("[bench] --dataset sharegpt needs --dataset-path");
  PAGELLM_ASSIGN_OR_RETURN(nlohmann::json entries, read_json_file(options.path));
  if (!entries.is_array()) {
    return invalid_argument("[bench] '{}' is not a ShareGPT file (expected a JSON list)", options.path);
  }
  auto count = [&](const std::string& text) {
    return tokenizer != nullptr ? tokenizer->count_tokens(text) : count_words(text);
  };
  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(options.seed);
  std::shuffle(order.begin(), order.end(), rng);

  Dataset dataset;
  for (size_t index : order) {
    if (static_cast<int>(dataset.requests.size()) == options.num_prompts) break;
    auto turns = first_two_turns(entries[index]);
    if (!turns) continue;
    BenchRequest request;
    request.prompt_text = std::move(turns->first);
    request.prompt_len = count(request.prompt_text);
    request.output_len = options.fixed_output_len.value_or(count(turns->second));
    if (!is_valid_sharegpt_pair(request.prompt_len, request.output_len,
                                options.fixed_output_len.has_value())) {
      continue;
    }
    dataset.requests.push_back(std::move(request));
  }
  if (dataset.requests.empty()) {
    return invalid_argument("[bench] no usable conversation in '{}' (need two turns of ≥ {} tokens, "
                            "prompt ≤ {}, total ≤ {})",
                            options.path, kShareGptMinTokens, kShareGptMaxPromptTokens,
                            kShareGptMaxTotalTokens);
  }
  size_t num_unique = dataset.requests.size();
  for (size_t i = 0; static_cast<int>(dataset.requests.size()) < options.num_prompts; ++i) {
    dataset.requests.push_back(dataset.requests[i % num_unique]);
  }
  if (static_cast<int>(num_unique) < options.num_prompts) {
    dataset.notes.push_back(fmt::format("sharegpt: only {} usable conversations, repeated to {} prompts",
                                        num_unique, options.num_prompts));
  }
  if (tokenizer == nullptr) {
    dataset.notes.push_back(
        "sharegpt token lengths approximated by whitespace word counts (no --tokenizer)");
  }
  return dataset;
}

}  // namespace pagellm::bench
