// Reasoning parsers (vLLM's --reasoning-parser): split a thinking model's output into
// reasoning_content and content, whole or streamed (an OutputParser, see tool_parser.h).
//
//   qwen3        "<think>reasoning</think>content". Without a leading <think> the output is content,
//                unless the prompt itself opened the block (templates that end the generation
//                prompt with "<think>\n", e.g. Qwen3-2507 thinking): then everything up to
//                </think> is reasoning. enable_thinking=false renders a closed, empty block, so the
//                output is content.
//   deepseek_r1  everything up to </think> is reasoning (a leading <think> is dropped); without
//                </think> the whole output is reasoning (the model was cut off while thinking).
//   openai       gpt-oss harmony: the analysis channel is reasoning (tool_parser_harmony.cpp).
// Whitespace between </think> and the answer is dropped.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_parser.h"

namespace pagellm::server {

const std::vector<std::string>& reasoning_parser_names();
bool is_reasoning_parser_name(std::string_view name);
bool reasoning_parser_needs_special_tokens(std::string_view name);  // harmony's channel tokens

// prompt: the rendered chat prompt (qwen3 looks whether it leaves a <think> block open).
std::unique_ptr<OutputParser> make_reasoning_parser(std::string_view name, std::string_view prompt);

// True when the prompt's last <think> has no </think> after it.
bool prompt_opens_think_block(std::string_view prompt);

}  // namespace pagellm::server
