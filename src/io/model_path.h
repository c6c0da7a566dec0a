// --model argument -> a model folder: an existing folder, or a Hugging Face repo id found in the
// local Hugging Face cache. pagellm never downloads.
//
// Cache layout (huggingface_hub):
//   <hub>/models--<org>--<name>/refs/<revision>        text file holding a commit hash
//   <hub>/models--<org>--<name>/snapshots/<hash>/      config.json, *.safetensors, ... (symlinks)
// <hub> = $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub.
#pragma once

#include <string>

#include "core/status.h"

namespace pagellm {

// `revision`: "" = refs/main (or, with no refs/main, the newest snapshot by mtime); a branch or
// tag name read from refs/; or a commit hash naming snapshots/<hash> directly.
Expected<std::string> resolve_model_path(const std::string& model_arg, const std::string& revision);

// The same lookup in an explicit hub cache folder (what resolve_model_path uses once it has
// found the folder from the environment).
Expected<std::string> resolve_in_hf_cache(const std::string& repo_id, const std::string& revision,
                                          const std::string& hub_cache_dir);

// The hub cache folder the environment points at (it may not exist).
std::string hf_hub_cache_dir();

// "org/name" as Hugging Face spells repo ids: letters, digits, '-', '_', '.'.
bool looks_like_hf_repo_id(const std::string& text);

}  // namespace pagellm
