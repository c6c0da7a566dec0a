#include "tokenizer/normalizer.h"

#include <cstdlib>
#include <vector>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "tokenizer/pattern.h"
#include "tokenizer/utf8.h"

namespace pagellm {
namespace {

using json = nlohmann::json;

// True when NFC leaves `text` unchanged for sure: every code point is below U+0300 or is a
// starter that neither decomposes canonically nor takes part in any composition (Hangul jamo are
// composed algorithmically, so they are excluded by range).
bool is_quick_nfc(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const char32_t cp = utf8::decode_at(text, pos);
    if (cp < 0x300) continue;
    if (cp >= 0x1100 && cp <= 0x11FF) return false;
    const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
    if (p->combining_class != 0 || p->comb_index != UINT16_MAX || p->comp_exclusion) return false;
    if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) return false;  // canonical
  }
  return true;
}

bool is_ascii(const std::string& text) {
  for (unsigned char c : text) {
    if (c >= 0x80) return false;
  }
  return true;
}

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) : form_(form) {}
  Status normalize(std::string& text) const override {
    text = unicode_normalize(text, form_);
    return Status::ok();
  }

 private:
  UnicodeForm form_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  Status normalize(std::string& text) const override {
    for (const auto& step : steps_) PAGELLM_RETURN_IF_ERROR(step->normalize(text));
    return Status::ok();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status normalize(std::string& text) const override {
    return pattern_.replace_all(text, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  Status normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
    return Status::ok();
  }

 private:
  std::string prefix_;
};

// Rust's char::is_whitespace is Unicode White_Space.
bool is_white_space(char32_t cp) {
  return (cp >= 0x9 && cp <= 0xD) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  Status normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!is_white_space(utf8::decode_at(text, next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t probe = start;
        if (!is_white_space(utf8::decode_at(text, probe))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
    return Status::ok();
  }

 private:
  bool left_, right_;
};

Expected<std::unique_ptr<Normalizer>> make_one(const json& config) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return invalid_argument("[tokenizer] normalizer must be an object with a string \"type\"");
  }
  const std::string type = config["type"].get<std::string>();
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::kNfc));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::kNfd));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::kNfkc));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::kNfkd));
  if (type == "Sequence") {
    if (!config.contains("normalizers") || !config["normalizers"].is_array()) {
      return invalid_argument("[tokenizer] Sequence normalizer needs a \"normalizers\" array");
    }
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& step : config["normalizers"]) {
      PAGELLM_ASSIGN_OR_RETURN(auto normalizer, make_one(step));
      steps.push_back(std::move(normalizer));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(steps)));
  }
  if (type == "Replace") {
    PAGELLM_ASSIGN_OR_RETURN(Pattern pattern, Pattern::from_json(config.value("pattern", json())));
    if (!config.contains("content") || !config["content"].is_string()) {
      return invalid_argument("[tokenizer] Replace normalizer needs a string \"content\"");
    }
    return std::unique_ptr<Normalizer>(
        new ReplaceNormalizer(std::move(pattern), config["content"].get<std::string>()));
  }
  if (type == "Prepend") {
    if (!config.contains("prepend") || !config["prepend"].is_string()) {
      return invalid_argument("[tokenizer] Prepend normalizer needs a string \"prepend\"");
    }
    return std::unique_ptr<Normalizer>(new PrependNormalizer(config["prepend"].get<std::string>()));
  }
  if (type == "Strip") {
    return std::unique_ptr<Normalizer>(
        new StripNormalizer(config.value("strip_left", true), config.value("strip_right", true)));
  }
  return unimplemented("[tokenizer] unsupported normalizer type '{}'", type);
}

}  // namespace

std::string unicode_normalize(const std::string& text, UnicodeForm form) {
  if (is_ascii(text)) return text;
  if (form == UnicodeForm::kNfc && is_quick_nfc(text)) return text;
  int options = UTF8PROC_STABLE;
  switch (form) {
    case UnicodeForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case UnicodeForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case UnicodeForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case UnicodeForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t len =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(options));
  if (len < 0) return text;  // cannot happen for valid UTF-8; keep the text rather than lose it
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(len));
  std::free(out);
  return result;
}

Expected<std::unique_ptr<Normalizer>> make_normalizer(const json& config) {
  if (config.is_null()) return std::unique_ptr<Normalizer>();
  // An empty Sequence is the identity: skip the copy it would cost.
  if (config.is_object() && config.value("type", std::string()) == "Sequence" &&
      config.contains("normalizers") && config["normalizers"].is_array() &&
      config["normalizers"].empty()) {
    return std::unique_ptr<Normalizer>();
  }
  return make_one(config);
}

}  // namespace pagellm
