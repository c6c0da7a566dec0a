// The prompt length in bytes past which a text prompt cannot fit in max_model_len tokens, so the
// server refuses it before tokenizing (a 16 MiB prompt would cost seconds of CPU first).
#pragma once

#include <cstddef>
#include <string>

#include "tokenizer/tokenizer.h"

namespace pagellm::server {

// Reads <tokenizer_dir>/tokenizer.json's pipeline: 0 (no check) when one of its steps may drop text.
size_t prompt_byte_limit(const Tokenizer& tokenizer, const std::string& tokenizer_dir, int max_model_len);

}  // namespace pagellm::server
