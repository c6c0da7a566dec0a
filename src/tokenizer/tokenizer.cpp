#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace pagellm {
namespace {

using json = nlohmann::json;

Expected<std::string> read_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return not_found("[tokenizer] file not found: '{}'", path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("[tokenizer] cannot open '{}'", path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Deepest nesting of arrays and objects in JSON text (outside strings). The loaders (and
// nlohmann's copies) recurse on nesting, so deeply nested input must be refused before parsing.
size_t nesting_depth(std::string_view text) {
  size_t depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return max_depth;
}

constexpr size_t kMaxJsonDepth = 64;

Expected<json> parse_json(std::string_view text, std::string_view what) {
  if (nesting_depth(text) > kMaxJsonDepth) {
    return invalid_argument("[tokenizer] {} nests arrays/objects deeper than {} levels", what, kMaxJsonDepth);
  }
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return invalid_argument("[tokenizer] malformed JSON in {}: {}", what, e.what());
  }
}

// A special token in tokenizer_config.json: "<s>" or {"content": "<s>", ...}.
std::string config_token(const json& config, const char* key) {
  if (!config.contains(key)) return "";
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return "";
}

Expected<std::vector<AddedToken>> parse_added_tokens(const json& root) {
  std::vector<AddedToken> tokens;
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return tokens;
  if (!root["added_tokens"].is_array()) {
    return invalid_argument("[tokenizer] \"added_tokens\" must be an array");
  }
  for (const auto& t : root["added_tokens"]) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string()) {
      return invalid_argument("[tokenizer] each added token needs an integer \"id\" and a string \"content\"");
    }
    const json& id_json = t["id"];
    const int64_t id = id_json.is_number_unsigned() && id_json.get<uint64_t>() > uint64_t(INT64_MAX)
                           ? INT64_MAX
                           : id_json.get<int64_t>();
    if (id > BpeModel::kMaxTokenId) {
      return invalid_argument("[tokenizer] added token id {} is out of range [0, {}]", id_json.dump(),
                              BpeModel::kMaxTokenId);
    }
    AddedToken token;
    token.id = static_cast<int32_t>(std::max<int64_t>(id, -1));
    token.content = t["content"].get<std::string>();
    token.special = t.value("special", false);
    token.single_word = t.value("single_word", false);
    token.lstrip = t.value("lstrip", false);
    token.rstrip = t.value("rstrip", false);
    token.normalized = t.value("normalized", !token.special);
    if (token.id < 0) return invalid_argument("[tokenizer] added token '{}' has a negative id", token.content);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

Expected<std::shared_ptr<const Tokenizer>> Tokenizer::from_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return from_dir(path);
  PAGELLM_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return from_json_text(text);
}

Expected<std::shared_ptr<const Tokenizer>> Tokenizer::from_dir(const std::string& dir) {
  const std::filesystem::path base(dir);
  PAGELLM_ASSIGN_OR_RETURN(std::string text, read_file((base / "tokenizer.json").string()));
  std::string config_text;
  std::error_code ec;
  if (std::filesystem::exists(base / "tokenizer_config.json", ec)) {
    PAGELLM_ASSIGN_OR_RETURN(config_text, read_file((base / "tokenizer_config.json").string()));
  }
  return from_json_text(text, config_text);
}

Expected<std::shared_ptr<const Tokenizer>> Tokenizer::from_json_text(std::string_view tokenizer_json,
                                                                     std::string_view config_json) {
  auto tok = parse(tokenizer_json, config_json);
  if (tok.has_value()) return tok;
  // Messages quote names from the file (vocab entries, types, patterns): keep them on one line.
  return Status(tok.status().code(), utf8::escape_controls(tok.status().message()));
}

Expected<std::shared_ptr<const Tokenizer>> Tokenizer::parse(std::string_view tokenizer_json,
                                                            std::string_view config_json) {
  PAGELLM_ASSIGN_OR_RETURN(json root, parse_json(tokenizer_json, "tokenizer.json"));
  if (!root.is_object()) return invalid_argument("[tokenizer] tokenizer.json must be a JSON object");
  if (!root.contains("model")) return invalid_argument("[tokenizer] tokenizer.json has no \"model\"");
  std::shared_ptr<Tokenizer> tok(new Tokenizer());
  try {
    for (const char* key : {"truncation", "padding"}) {
      if (root.contains(key) && !root[key].is_null()) {
        return unimplemented("[tokenizer] unsupported tokenizer.json feature: {}", key);
      }
    }
    const json null_json;
    auto section = [&](const char* key) -> const json& {
      return root.contains(key) ? root[key] : null_json;
    };
    PAGELLM_ASSIGN_OR_RETURN(tok->normalizer_, make_normalizer(section("normalizer")));
    PAGELLM_ASSIGN_OR_RETURN(PreTokenizerChain chain, make_pre_tokenizer(section("pre_tokenizer")));
    tok->pre_tokenizer_ = std::make_unique<PreTokenizerChain>(std::move(chain));
    PAGELLM_ASSIGN_OR_RETURN(tok->model_, BpeModel::from_json(root["model"], tok->pre_tokenizer_->byte_level));
    PAGELLM_ASSIGN_OR_RETURN(std::vector<AddedToken> added, parse_added_tokens(root));
    PAGELLM_ASSIGN_OR_RETURN(AddedVocabulary vocab,
                             AddedVocabulary::build(std::move(added), tok->normalizer_.get()));
    tok->added_ = std::make_unique<AddedVocabulary>(std::move(vocab));
    PAGELLM_ASSIGN_OR_RETURN(PostProcessor pp, make_post_processor(section("post_processor")));
    tok->post_processor_ = std::make_unique<PostProcessor>(std::move(pp));
    PAGELLM_ASSIGN_OR_RETURN(tok->decoder_, make_decoder(section("decoder")));
  } catch (const json::exception& e) {
    return invalid_argument("[tokenizer] malformed tokenizer.json: {}", e.what());
  }

  // Id tables.
  int64_t max_id = tok->model_->max_id();
  for (const auto& t : tok->added_->tokens()) max_id = std::max<int64_t>(max_id, t.id);
  tok->vocab_size_ = max_id + 1;
  for (const auto* ids : {&tok->post_processor_->prefix_ids, &tok->post_processor_->suffix_ids}) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= tok->vocab_size_) {
        return invalid_argument("[tokenizer] post_processor id {} is not in the vocabulary", id);
      }
    }
  }
  std::unordered_set<std::string> special_contents;
  for (const auto& t : tok->added_->tokens()) {
    if (t.special) special_contents.insert(t.content);
  }
  tok->is_special_.assign(static_cast<size_t>(tok->vocab_size_), false);
  tok->is_byte_fallback_.assign(static_cast<size_t>(tok->vocab_size_), false);
  for (int32_t id = 0; id < tok->vocab_size_; ++id) {
    const std::string* s = tok->token_string(id);
    if (!s) continue;
    tok->is_special_[id] = special_contents.count(*s) > 0;
    unsigned char byte;
    tok->is_byte_fallback_[id] = parse_byte_fallback_token(*s, byte);
  }

  // tokenizer_config.json: reported, not applied (HF's Tokenizer follows tokenizer.json).
  if (!config_json.empty()) {
    PAGELLM_ASSIGN_OR_RETURN(json config, parse_json(config_json, "tokenizer_config.json"));
    if (!config.is_object()) {
      return invalid_argument("[tokenizer] tokenizer_config.json must be a JSON object");
    }
    tok->bos_token_ = config_token(config, "bos_token");
    tok->eos_token_ = config_token(config, "eos_token");
    if (!tok->bos_token_.empty()) tok->bos_token_id_ = tok->token_to_id(tok->bos_token_);
    if (!tok->eos_token_.empty()) tok->eos_token_id_ = tok->token_to_id(tok->eos_token_);
    auto flag = [&](const char* key) {
      return config.contains(key) && config[key].is_boolean() && config[key].get<bool>();
    };
    tok->add_bos_token_ = flag("add_bos_token");
    tok->add_eos_token_ = flag("add_eos_token");
  }
  return std::shared_ptr<const Tokenizer>(std::move(tok));
}

Expected<std::vector<int32_t>> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const size_t bad = utf8::first_invalid_offset(text);
  if (bad != text.size()) {
    return invalid_argument("[tokenizer] input is not valid UTF-8 (invalid byte 0x{:02X} at offset {})",
                            static_cast<unsigned char>(text[bad]), bad);
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  thread_local std::vector<TextSegment> segments;
  segments.clear();
  added_->split_raw(text, segments);
  // Copy: encode_text below reuses the thread-local vector for the normalized split.
  const std::vector<TextSegment> raw_segments = segments;
  for (const auto& seg : raw_segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else if (seg.end > seg.begin) {
      PAGELLM_RETURN_IF_ERROR(
          encode_text(text.substr(seg.begin, seg.end - seg.begin), seg.begin == 0, ids));
    }
  }
  if (add_special_tokens) ids = post_processor_->apply(std::move(ids));
  return ids;
}

Status Tokenizer::encode_text(std::string_view text, bool at_origin, std::vector<int32_t>& ids) const {
  std::string normalized;
  std::string_view view = text;
  if (normalizer_) {
    normalized.assign(text);
    PAGELLM_RETURN_IF_ERROR(normalizer_->normalize(normalized));
    view = normalized;
  }
  if (!added_->has_normalized_tokens()) return encode_words(view, at_origin, ids);
  std::vector<TextSegment> segments;
  added_->split_normalized(view, segments);
  for (const auto& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else if (seg.end > seg.begin) {
      PAGELLM_RETURN_IF_ERROR(encode_words(view.substr(seg.begin, seg.end - seg.begin),
                                           at_origin && seg.begin == 0, ids));
    }
  }
  return Status::ok();
}

Status Tokenizer::encode_words(std::string_view text, bool at_origin, std::vector<int32_t>& ids) const {
  thread_local PreTokenized pt;
  pt.text.assign(text);
  pt.pieces.clear();
  pt.pieces.emplace_back(0, static_cast<uint32_t>(pt.text.size()));
  pt.starts_at_origin = at_origin;
  PAGELLM_RETURN_IF_ERROR(pre_tokenizer_->run(pt));
  const std::string_view all(pt.text);
  for (const auto& [b, e] : pt.pieces) model_->encode_word(all.substr(b, e - b), ids);
  return Status::ok();
}

const std::string* Tokenizer::token_string(int32_t id) const {
  if (const AddedToken* t = added_->find_by_id(id)) return &t->content;
  return model_->id_to_token(id);
}

std::string Tokenizer::decode_window(const int32_t* ids, size_t count, bool at_start) const {
  std::vector<std::string> tokens;
  tokens.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (const std::string* s = token_string(ids[i])) tokens.push_back(*s);
  }
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  decoder_->decode_chain(tokens, at_start);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  if (!skip_special_tokens) return decode_window(ids.data(), ids.size(), true);
  std::vector<int32_t> kept;
  kept.reserve(ids.size());
  for (int32_t id : ids) {
    if (!is_special(id)) kept.push_back(id);
  }
  return decode_window(kept.data(), kept.size(), true);
}

bool Tokenizer::decoder_has_byte_fallback() const {
  return decoder_ && decoder_->has_byte_fallback();
}

bool Tokenizer::is_byte_fallback_token(int32_t id) const {
  return id >= 0 && id < vocab_size_ && is_byte_fallback_[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* t = added_->find_by_content(token)) return t->id;
  return model_->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const std::string* s = token_string(id);
  return s ? *s : std::string();
}

}  // namespace pagellm
