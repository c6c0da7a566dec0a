#include "server/prompt_byte_limit.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace pagellm::server {

namespace {

// True when no step of the tokenizer.json pipeline can drop text outright: normalizers that only
// rewrite (NFC..NFKD, Prepend, Replace by nothing shorter), pre-tokenizers that keep every byte
// (Split without "Removed", ByteLevel, Metaspace, Digits), no fused unknown runs.
bool keeps_all_text(const nlohmann::json& step, bool is_normalizer) {
  if (step.is_null()) return true;
  if (!step.is_object()) return false;
  const std::string type = step.value("type", "");
  if (type == "Sequence") {
    const nlohmann::json& items = step.contains("normalizers") ? step["normalizers"] : step["pretokenizers"];
    if (!items.is_array()) return false;
    for (const auto& item : items)
      if (!keeps_all_text(item, is_normalizer)) return false;
    return true;
  }
  if (is_normalizer) {
    if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD" || type == "Prepend") return true;
    if (type != "Replace" || !step.contains("pattern") || !step["pattern"].contains("String")) return false;
    const auto& pattern = step["pattern"]["String"];
    const auto& content = step["content"];
    return pattern.is_string() && content.is_string() &&
           content.get<std::string>().size() >= pattern.get<std::string>().size();
  }
  if (type == "ByteLevel" || type == "Metaspace" || type == "Digits") return true;
  return type == "Split" && step.value("behavior", "") != "Removed";
}

}  // namespace

// The prompt length in bytes past which a text prompt cannot fit in max_model_len tokens, so it is
// refused before tokenizing (a 16 MiB prompt would cost seconds of CPU first). Each token stands
// for at most L bytes of normalized text, L the longest token string (never shorter than the bytes
// it decodes to: byte-level "Ġ" forms, "▁" for a space, "<0x41>"); Unicode normalization shrinks
// text at most 4 times (NFKC: a 4-byte letter becomes 1 byte). So B bytes give at least B / (4 L)
// tokens, and B > 4 L max_model_len bytes cannot fit. A pipeline that may drop text has no such
// bound: 0, no check.
size_t prompt_byte_limit(const Tokenizer& tokenizer, const std::string& tokenizer_dir, int max_model_len) {
  std::ifstream in(std::filesystem::path(tokenizer_dir) / "tokenizer.json", std::ios::binary);
  if (!in || max_model_len <= 0) return 0;
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object() || !keeps_all_text(config.value("normalizer", nlohmann::json()), true) ||
      !keeps_all_text(config.value("pre_tokenizer", nlohmann::json()), false))
    return 0;
  if (config.contains("model") && config["model"].value("fuse_unk", false)) return 0;
  size_t longest_token_bytes = 0;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
    longest_token_bytes = std::max(longest_token_bytes, tokenizer.id_to_token(id).size());
  constexpr size_t kMaxNormalizationShrink = 4;
  return std::max<size_t>(longest_token_bytes, 4) * kMaxNormalizationShrink * static_cast<size_t>(max_model_len);
}

}  // namespace pagellm::server
