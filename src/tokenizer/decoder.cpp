#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"
#include "tokenizer/utf8.h"

namespace pagellm {
namespace {

using json = nlohmann::json;

// Tokens -> bytes through the byte-level alphabet (a token with other characters contributes its
// own UTF-8 bytes, e.g. added tokens), then one lossy UTF-8 conversion of everything.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens, bool) const override {
    const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
    std::string bytes;
    for (const auto& token : tokens) {
      if (auto decoded = alphabet.decode(token)) {
        bytes += *decoded;
      } else {
        bytes += token;
      }
    }
    tokens.assign(1, utf8::from_bytes_lossy(bytes));
  }
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens, bool) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;  // bytes of consecutive <0xHH> tokens
    size_t pending_count = 0;
    auto flush = [&] {
      if (pending_count == 0) return;
      if (utf8::is_valid(pending)) {
        out.push_back(pending);
      } else {
        // HF: an invalid run becomes one U+FFFD per byte token.
        for (size_t i = 0; i < pending_count; ++i) out.emplace_back(utf8::kReplacementChar);
      }
      pending.clear();
      pending_count = 0;
    };
    for (auto& token : tokens) {
      unsigned char byte;
      if (parse_byte_fallback_token(token, byte)) {
        pending.push_back(static_cast<char>(byte));
        ++pending_count;
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }
  bool has_byte_fallback() const override { return true; }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens, bool) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens, bool) const override {
    // Literal patterns cannot fail; a regex failure leaves the token as it was.
    for (auto& t : tokens) (void)pattern_.replace_all(t, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Removes up to `start` leading and `stop` trailing occurrences of `content` from each token.
//
// After a Fuse (or ByteLevel) earlier in the chain the list holds one string, the whole output:
// its leading strip (Llama 2 / Mistral's Strip(" ", 1, 0), which removes the space the Prepend
// normalizer put before the first word) belongs to the output's start only, so a window that
// starts mid-output (at_start = false) keeps its leading spaces.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop, bool after_join)
      : content_(std::move(content)), start_(start), stop_(stop), after_join_(after_join) {}
  void decode_chain(std::vector<std::string>& tokens, bool at_start) const override {
    if (content_.empty()) return;
    const size_t start = after_join_ && !at_start ? 0 : start_;
    for (auto& t : tokens) {
      size_t begin = 0, end = t.size();
      for (size_t i = 0; i < start && t.compare(begin, content_.size(), content_) == 0 &&
                         begin + content_.size() <= end;
           ++i) {
        begin += content_.size();
      }
      for (size_t i = 0; i < stop_ && end >= begin + content_.size() &&
                         t.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i) {
        end -= content_.size();
      }
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
  bool after_join_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool prepend)
      : replacement_(std::move(replacement)), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens, bool at_start) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      // HF drops every replacement character of the output's first token.
      const bool drop = i == 0 && at_start && prepend_;
      std::string out;
      const std::string& t = tokens[i];
      size_t pos = 0;
      while (pos < t.size()) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!drop) out.push_back(' ');
          pos += replacement_.size();
        } else {
          out.push_back(t[pos++]);
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool prepend_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens, bool at_start) const override {
    for (const auto& step : steps_) step->decode_chain(tokens, at_start);
  }
  bool has_byte_fallback() const override {
    for (const auto& step : steps_) {
      if (step->has_byte_fallback()) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

// after_join: a Fuse or ByteLevel step came earlier in the enclosing Sequence.
Expected<std::unique_ptr<Decoder>> make_one(const json& config, bool after_join) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return invalid_argument("[tokenizer] decoder must be an object with a string \"type\"");
  }
  const std::string type = config["type"].get<std::string>();
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Replace") {
    PAGELLM_ASSIGN_OR_RETURN(Pattern pattern, Pattern::from_json(config.value("pattern", json())));
    if (!config.contains("content") || !config["content"].is_string()) {
      return invalid_argument("[tokenizer] Replace decoder needs a string \"content\"");
    }
    return std::unique_ptr<Decoder>(
        new ReplaceDecoder(std::move(pattern), config["content"].get<std::string>()));
  }
  if (type == "Strip") {
    size_t counts[2] = {0, 0};  // start, stop: non-negative integers (a float would not convert)
    for (int k = 0; k < 2; ++k) {
      const char* key = k == 0 ? "start" : "stop";
      if (!config.contains(key)) continue;
      if (!config[key].is_number_integer() || config[key].get<int64_t>() < 0) {
        return invalid_argument("[tokenizer] Strip decoder \"{}\" must be a non-negative integer", key);
      }
      counts[k] = config[key].get<size_t>();
    }
    return std::unique_ptr<Decoder>(
        new StripDecoder(config.value("content", std::string(" ")), counts[0], counts[1], after_join));
  }
  if (type == "Metaspace") {
    bool prepend = true;
    if (config.contains("prepend_scheme") && config["prepend_scheme"].is_string()) {
      prepend = config["prepend_scheme"].get<std::string>() != "never";
    } else if (config.contains("add_prefix_space")) {
      prepend = config.value("add_prefix_space", true);
    }
    const std::string replacement = config.value("replacement", std::string("\xE2\x96\x81"));
    if (replacement.empty()) return invalid_argument("[tokenizer] Metaspace replacement must be one character");
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(replacement, prepend));
  }
  if (type == "Sequence") {
    if (!config.contains("decoders") || !config["decoders"].is_array()) {
      return invalid_argument("[tokenizer] Sequence decoder needs a \"decoders\" array");
    }
    std::vector<std::unique_ptr<Decoder>> steps;
    bool joined = after_join;
    for (const auto& step : config["decoders"]) {
      PAGELLM_ASSIGN_OR_RETURN(auto decoder, make_one(step, joined));
      steps.push_back(std::move(decoder));
      const std::string step_type = step.value("type", std::string());
      joined = joined || step_type == "Fuse" || step_type == "ByteLevel";
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(steps)));
  }
  return unimplemented("[tokenizer] unsupported decoder type '{}'", type);
}

}  // namespace

bool parse_byte_fallback_token(const std::string& token, unsigned char& byte) {
  if (token.size() != 6 || token[0] != '<' || token[1] != '0' || token[2] != 'x' || token[5] != '>') {
    return false;
  }
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(token[3]), lo = hex(token[4]);
  if (hi < 0 || lo < 0) return false;
  byte = static_cast<unsigned char>(hi * 16 + lo);
  return true;
}

Expected<std::unique_ptr<Decoder>> make_decoder(const json& config) {
  if (config.is_null()) return std::unique_ptr<Decoder>();
  return make_one(config, false);
}

}  // namespace pagellm
