// Shared handling of --model: a folder, a Hugging Face repo id in the local cache, or (when empty)
// the embedded demo model.
#pragma once

#include <string>

namespace pagellm::cli {

// Returns the model folder; throws CommandError with a one-line reason otherwise.
std::string resolve_model_or_demo(const std::string& model_arg, const std::string& revision);

}  // namespace pagellm::cli
