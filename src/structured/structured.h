// Structured outputs: constraints (JSON Schema, any JSON object, regex, a list of choices, EBNF)
// compiled to byte-level grammars, and per-request matchers that turn a grammar into a bitmask
// over the model's vocabulary before each step.
//
// How the server and engine use it:
//
//   // once per model, shared by all requests (about a second for a 150k vocabulary)
//   auto vocab = TokenVocabulary::from_tokenizer(*tokenizer, generation_config_eos_ids);
//   GrammarCompiler compiler(*vocab);
//
//   // HTTP thread, per request: validate and compile (cached by the constraint's text, so the
//   // second request with the same schema costs a lookup). An error is a 400 with its message,
//   // e.g. "[structured] unsupported JSON Schema keyword 'not' at #/properties/x".
//   Expected<std::shared_ptr<const CompiledGrammar>> g =
//       compiler.compile({ConstraintKind::kJsonSchema, schema_text});
//
//   // the request owns a matcher; the engine thread drives it
//   GrammarMatcher matcher(*g);
//   matcher.fill_next_token_bitmask(words);   // before the step: bit i = token i allowed
//   ... sample with the mask applied to the logits (tokens past the mask are not allowed) ...
//   matcher.accept_token(sampled_id);          // after the step commits; false = a bug upstream
//   matcher.rollback(n);                       // speculative tokens rejected
//   matcher.is_terminated();                   // a stop token was accepted
//
// Masks are cached inside the CompiledGrammar (compiled_grammar.h), so the same schema gets
// cheaper as requests repeat; a CompiledGrammar may be shared by matchers on several threads.
// Cost (H100 host, Qwen3's 151k vocabulary, nested schema): a state seen before is a cache hit;
// a new state over known stack suffixes is ~10-20 us; a new stack suffix walks the vocabulary
// once (~1-3 ms), which is what the first request of a new schema mostly pays (~0.4 ms/token
// averaged over it). Fill masks while the previous step runs on the device to hide it.
// Output is compact JSON for the JSON kinds (no whitespace between tokens), so a constrained
// request ends with parseable JSON as soon as the mask allows only stop tokens.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "structured/compiled_grammar.h"
#include "structured/grammar.h"
#include "structured/grammar_matcher.h"
#include "structured/token_vocabulary.h"

namespace pagellm::structured {

enum class ConstraintKind {
  kJsonSchema,  // text: the schema (JSON)
  kJsonObject,  // any JSON object; text unused
  kRegex,       // text: the pattern, matched whole
  kChoice,      // choices: the output is exactly one of them
  kGrammar,     // text: EBNF with a "root" rule (ebnf_compiler.h)
};

struct Constraint {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  std::string text;
  std::vector<std::string> choices;
};

// The constraint as a grammar (no vocabulary needed: this is where user errors are found).
Expected<Grammar> grammar_for(const Constraint& constraint);
Expected<Grammar> grammar_from_choices(const std::vector<std::string>& choices);

// Compiles constraints against one vocabulary and keeps the most recently used ones.
class GrammarCompiler {
 public:
  explicit GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocab, size_t max_cached = 256)
      : vocab_(std::move(vocab)), max_cached_(max_cached) {}

  Expected<std::shared_ptr<const CompiledGrammar>> compile(const Constraint& constraint);
  const std::shared_ptr<const TokenVocabulary>& vocab() const { return vocab_; }

 private:
  static std::string cache_key(const Constraint& constraint);

  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t max_cached_;
  std::mutex mutex_;
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> lru_;  // front = newest
  std::unordered_map<std::string, decltype(lru_)::iterator> by_key_;
};

}  // namespace pagellm::structured
