// Pre-tokenizers of tokenizer.json ("pre_tokenizer": {...}): cut a normalized piece of text into
// words that the model encodes independently.
//
//   text:    "Hello  world!"
//   pieces:  [0,5) [5,6) [6,12) [12,13)      spans into `text`, in order, never empty
//
// A pre-tokenizer that rewrites characters (Metaspace, ByteLevel's prefix space) rebuilds `text`.
// The ByteLevel step's byte -> alphabet mapping is not done here: when ByteLevel ends the chain,
// the BPE model consumes raw bytes directly (PreTokenizerChain::byte_level), which is equivalent
// and saves a copy of every word.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace pagellm {

struct PreTokenized {
  std::string text;
  std::vector<Regex::Span> pieces;
  bool starts_at_origin = true;  // text begins at offset 0 of the user's input (Metaspace "first")
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual Status pre_tokenize(PreTokenized& pt) const = 0;
};

struct PreTokenizerChain {
  std::vector<std::unique_ptr<PreTokenizer>> steps;  // nested Sequences flattened
  bool byte_level = false;  // ByteLevel ended the chain: words are raw bytes for a byte-level BPE

  Status run(PreTokenized& pt) const {
    for (const auto& step : steps) PAGELLM_RETURN_IF_ERROR(step->pre_tokenize(pt));
    return Status::ok();
  }
};

// Builds the chain for a tokenizer.json "pre_tokenizer" (null: one piece per added-token split).
Expected<PreTokenizerChain> make_pre_tokenizer(const nlohmann::json& config);

}  // namespace pagellm
