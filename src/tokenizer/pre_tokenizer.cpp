#include "tokenizer/pre_tokenizer.h"

#include <string_view>

#include <nlohmann/json.hpp>

#include "tokenizer/pattern.h"

namespace pagellm {
namespace {

using json = nlohmann::json;
using Span = Regex::Span;

// GPT-2's pattern, used by ByteLevel when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Turns the matches inside one piece [0, n) into pieces, following HF's SplitDelimiterBehavior.
// `out` receives spans relative to the piece.
void apply_behavior(const std::vector<Span>& matches, uint32_t n, SplitBehavior behavior,
                    bool invert, std::vector<Span>& out) {
  // Cover [0, n) with (span, is_match) segments.
  struct Segment {
    Span span;
    bool is_match;
  };
  thread_local std::vector<Segment> segments;
  segments.clear();
  uint32_t prev = 0;
  for (const auto& m : matches) {
    if (m.first != prev) segments.push_back({{prev, m.first}, invert});
    segments.push_back({m, !invert});
    prev = m.second;
  }
  if (prev != n) segments.push_back({{prev, n}, invert});

  auto push = [&out](Span s) {
    if (s.second > s.first) out.push_back(s);
  };
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const auto& s : segments) push(s.span);
      break;
    case SplitBehavior::kRemoved:
      for (const auto& s : segments) {
        if (!s.is_match) push(s.span);
      }
      break;
    case SplitBehavior::kMergedWithPrevious: {
      // A match joins the segment before it unless that one was a match too.
      std::vector<Span> acc;
      bool previous_match = false;
      for (const auto& s : segments) {
        if (s.is_match && !previous_match && !acc.empty()) {
          acc.back().second = s.span.second;
        } else {
          acc.push_back(s.span);
        }
        previous_match = s.is_match;
      }
      for (const auto& s : acc) push(s);
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      // A match joins the segment after it unless that one is a match too.
      std::vector<Span> acc;
      bool next_match = false;
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !next_match && !acc.empty()) {
          acc.back().first = it->span.first;
        } else {
          acc.push_back(it->span);
        }
        next_match = it->is_match;
      }
      for (auto it = acc.rbegin(); it != acc.rend(); ++it) push(*it);
      break;
    }
    case SplitBehavior::kContiguous: {
      std::vector<Span> acc;
      int previous = -1;
      for (const auto& s : segments) {
        if (previous == int(s.is_match) && !acc.empty()) {
          acc.back().second = s.span.second;
        } else {
          acc.push_back(s.span);
        }
        previous = s.is_match;
      }
      for (const auto& s : acc) push(s);
      break;
    }
  }
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}

  Status pre_tokenize(PreTokenized& pt) const override {
    thread_local std::vector<Span> matches;
    thread_local std::vector<Span> local;
    std::vector<Span> result;
    result.reserve(pt.pieces.size() * 2);
    for (const auto& piece : pt.pieces) {
      matches.clear();
      local.clear();
      const std::string_view sub(pt.text.data() + piece.first, piece.second - piece.first);
      PAGELLM_RETURN_IF_ERROR(pattern_.find_all(sub, matches));
      apply_behavior(matches, static_cast<uint32_t>(sub.size()), behavior_, invert_, local);
      for (const auto& s : local) result.emplace_back(s.first + piece.first, s.second + piece.first);
    }
    pt.pieces = std::move(result);
    return Status::ok();
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// Rebuilds pt.text from rewritten pieces; `rewrite(index, piece_text, out)` appends the new
// text of one piece (possibly several sub-pieces, reported through `cut`).
template <typename Rewrite>
void rebuild(PreTokenized& pt, Rewrite rewrite) {
  std::string text;
  text.reserve(pt.text.size() + pt.pieces.size());
  std::vector<Span> pieces;
  pieces.reserve(pt.pieces.size());
  for (size_t i = 0; i < pt.pieces.size(); ++i) {
    const auto& piece = pt.pieces[i];
    const std::string_view sub(pt.text.data() + piece.first, piece.second - piece.first);
    rewrite(i, sub, text, pieces);
  }
  pt.text = std::move(text);
  pt.pieces = std::move(pieces);
}

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::shared_ptr<const Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  Status pre_tokenize(PreTokenized& pt) const override {
    if (add_prefix_space_) {
      rebuild(pt, [](size_t, std::string_view sub, std::string& text, std::vector<Span>& pieces) {
        const auto begin = static_cast<uint32_t>(text.size());
        if (sub.empty() || sub[0] != ' ') text.push_back(' ');
        text.append(sub);
        pieces.emplace_back(begin, static_cast<uint32_t>(text.size()));
      });
    }
    if (regex_) {
      thread_local std::vector<Span> matches;
      thread_local std::vector<Span> local;
      std::vector<Span> result;
      for (const auto& piece : pt.pieces) {
        matches.clear();
        local.clear();
        const std::string_view sub(pt.text.data() + piece.first, piece.second - piece.first);
        PAGELLM_RETURN_IF_ERROR(regex_->find_all(sub, matches));
        apply_behavior(matches, static_cast<uint32_t>(sub.size()), SplitBehavior::kIsolated, false,
                       local);
        for (const auto& s : local) result.emplace_back(s.first + piece.first, s.second + piece.first);
      }
      pt.pieces = std::move(result);
    }
    return Status::ok();
  }

 private:
  bool add_prefix_space_;
  std::shared_ptr<const Regex> regex_;  // null when use_regex is false
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}

  Status pre_tokenize(PreTokenized& pt) const override {
    const bool at_origin = pt.starts_at_origin;
    const char* origin = pt.text.data();
    rebuild(pt, [&](size_t, std::string_view sub, std::string& text, std::vector<Span>& pieces) {
      const auto begin = static_cast<uint32_t>(text.size());
      const bool piece_at_origin = at_origin && sub.data() == origin;
      std::string word;
      word.reserve(sub.size() + replacement_.size());
      for (char c : sub) {
        if (c == ' ') {
          word += replacement_;
        } else {
          word.push_back(c);
        }
      }
      const bool starts_with_replacement = word.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts_with_replacement &&
          (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && piece_at_origin))) {
        word.insert(0, replacement_);
      }
      text.append(word);
      if (!split_) {
        pieces.emplace_back(begin, static_cast<uint32_t>(text.size()));
        return;
      }
      // Split on the replacement, each one starting a new piece (MergedWithNext).
      size_t start = 0;
      size_t pos = word.find(replacement_, 1);
      while (pos != std::string::npos) {
        pieces.emplace_back(begin + start, begin + pos);
        start = pos;
        pos = word.find(replacement_, pos + replacement_.size());
      }
      if (start < word.size()) pieces.emplace_back(begin + start, begin + word.size());
    });
    return Status::ok();
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

Expected<SplitBehavior> parse_behavior(const json& config) {
  const std::string b = config.is_string() ? config.get<std::string>() : "";
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return invalid_argument("[tokenizer] unknown Split behavior '{}'", config.is_string() ? b : config.type_name());
}

Status add_steps(const json& config, PreTokenizerChain& chain) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return invalid_argument("[tokenizer] pre_tokenizer must be an object with a string \"type\"");
  }
  if (chain.byte_level) {
    return unimplemented(
        "[tokenizer] unsupported pre_tokenizer: ByteLevel followed by another pre-tokenizer");
  }
  const std::string type = config["type"].get<std::string>();
  if (type == "Sequence") {
    if (!config.contains("pretokenizers") || !config["pretokenizers"].is_array()) {
      return invalid_argument("[tokenizer] Sequence pre_tokenizer needs a \"pretokenizers\" array");
    }
    for (const auto& step : config["pretokenizers"]) PAGELLM_RETURN_IF_ERROR(add_steps(step, chain));
    return Status::ok();
  }
  if (type == "Split") {
    PAGELLM_ASSIGN_OR_RETURN(Pattern pattern, Pattern::from_json(config.value("pattern", json())));
    PAGELLM_ASSIGN_OR_RETURN(SplitBehavior behavior, parse_behavior(config.value("behavior", json())));
    chain.steps.push_back(std::make_unique<SplitPreTokenizer>(std::move(pattern), behavior,
                                                              config.value("invert", false)));
    return Status::ok();
  }
  if (type == "ByteLevel") {
    std::shared_ptr<const Regex> regex;
    if (config.value("use_regex", true)) {
      PAGELLM_ASSIGN_OR_RETURN(regex, Regex::compile(kGpt2Pattern));
    }
    chain.steps.push_back(
        std::make_unique<ByteLevelPreTokenizer>(config.value("add_prefix_space", true), regex));
    chain.byte_level = true;
    return Status::ok();
  }
  if (type == "Metaspace") {
    const std::string replacement = config.value("replacement", std::string("\xE2\x96\x81"));
    if (replacement.empty()) return invalid_argument("[tokenizer] Metaspace replacement must be one character");
    PrependScheme scheme = PrependScheme::kAlways;
    if (config.contains("prepend_scheme") && config["prepend_scheme"].is_string()) {
      const std::string s = config["prepend_scheme"].get<std::string>();
      if (s == "always") scheme = PrependScheme::kAlways;
      else if (s == "first") scheme = PrependScheme::kFirst;
      else if (s == "never") scheme = PrependScheme::kNever;
      else return invalid_argument("[tokenizer] unknown Metaspace prepend_scheme '{}'", s);
    } else if (config.contains("add_prefix_space")) {
      scheme = config.value("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    chain.steps.push_back(
        std::make_unique<MetaspacePreTokenizer>(replacement, scheme, config.value("split", true)));
    return Status::ok();
  }
  if (type == "Digits") {
    // Rust's char::is_numeric is \p{N}; runs of digits form one piece unless individual_digits.
    const bool individual = config.value("individual_digits", false);
    PAGELLM_ASSIGN_OR_RETURN(
        Pattern pattern,
        Pattern::from_json(json{{"Regex", individual ? "\\p{N}" : "\\p{N}+"}}));
    chain.steps.push_back(
        std::make_unique<SplitPreTokenizer>(std::move(pattern), SplitBehavior::kIsolated, false));
    return Status::ok();
  }
  if (type == "WhitespaceSplit") {
    PAGELLM_ASSIGN_OR_RETURN(Pattern pattern, Pattern::from_json(json{{"Regex", "\\s+"}}));
    chain.steps.push_back(
        std::make_unique<SplitPreTokenizer>(std::move(pattern), SplitBehavior::kRemoved, false));
    return Status::ok();
  }
  return unimplemented("[tokenizer] unsupported pre_tokenizer type '{}'", type);
}

}  // namespace

Expected<PreTokenizerChain> make_pre_tokenizer(const json& config) {
  PreTokenizerChain chain;
  if (config.is_null()) return chain;
  PAGELLM_RETURN_IF_ERROR(add_steps(config, chain));
  return chain;
}

}  // namespace pagellm
