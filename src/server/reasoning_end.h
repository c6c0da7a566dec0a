// ReasoningEnd: where a thinking model's reasoning ends, in token ids, for structured outputs with a
// reasoning parser. As vLLM does, the grammar then constrains only the answer: the model reasons
// freely, and the mask applies from the token after the end marker.
//
//   parser        end marker (output tokens)          the prompt already ended the reasoning when
//   qwen3         </think>                            its last <think> / </think> token is </think>
//   deepseek_r1   </think>                            (Qwen3's enable_thinking=false renders
//                                                      "<think>\n\n</think>\n\n")
//   openai        <|channel|> final <|message|>       the marker follows its last <|start|>
//
// A prompt with neither think token leaves the reasoning open (vLLM's rule): the model is expected to
// write <think> ... </think> before the answer.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "cache/ids.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::server {

// The output tokens after which the grammar applies (GenerateRequest::grammar_starts_after): empty
// when there is no reasoning parser, the tokenizer lacks the marker's tokens, or `prompt_ids`
// already ended the reasoning (the grammar applies from the first token).
std::vector<TokenId> grammar_start_marker(std::string_view reasoning_parser, const Tokenizer& tokenizer,
                                          std::span<const TokenId> prompt_ids);

}  // namespace pagellm::server
