#include "server/reasoning_end.h"

#include <algorithm>
#include <optional>

namespace pagellm::server {

namespace {

// The ids of these special tokens, in order; empty when one is missing.
std::vector<TokenId> ids_of(const Tokenizer& tokenizer, std::initializer_list<std::string_view> tokens) {
  std::vector<TokenId> ids;
  for (std::string_view token : tokens) {
    const std::optional<int32_t> id = tokenizer.token_to_id(token);
    if (!id) return {};
    ids.push_back(*id);
  }
  return ids;
}

// Think blocks: the last of <think> and </think> in the prompt decides (vLLM's is_reasoning_end).
bool prompt_closed_think_block(std::span<const TokenId> prompt, TokenId start, TokenId end) {
  for (auto it = prompt.rbegin(); it != prompt.rend(); ++it) {
    if (*it == start) return false;
    if (*it == end) return true;
  }
  return false;
}

// Harmony: the final channel's header after the prompt's last <|start|> (the turn being written).
bool prompt_opened_final_channel(std::span<const TokenId> prompt, TokenId start, const std::vector<TokenId>& marker) {
  const auto turn = std::find(prompt.rbegin(), prompt.rend(), start).base();  // after the last <|start|>
  return std::search(turn, prompt.end(), marker.begin(), marker.end()) != prompt.end();
}

}  // namespace

std::vector<TokenId> grammar_start_marker(std::string_view reasoning_parser, const Tokenizer& tokenizer,
                                          std::span<const TokenId> prompt_ids) {
  if (reasoning_parser == "qwen3" || reasoning_parser == "deepseek_r1") {
    const std::vector<TokenId> think = ids_of(tokenizer, {"<think>", "</think>"});
    if (think.empty() || prompt_closed_think_block(prompt_ids, think[0], think[1])) return {};
    return {think[1]};
  }
  if (reasoning_parser == "openai") {
    std::vector<TokenId> marker = ids_of(tokenizer, {"<|channel|>", "final", "<|message|>"});
    const std::vector<TokenId> start = ids_of(tokenizer, {"<|start|>"});
    if (marker.empty() || start.empty() || prompt_opened_final_channel(prompt_ids, start[0], marker)) return {};
    return marker;
  }
  return {};
}

}  // namespace pagellm::server
