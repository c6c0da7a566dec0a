#include "structured/structured.h"

#include "structured/ebnf_compiler.h"
#include "structured/grammar_builder.h"
#include "structured/json_schema_compiler.h"
#include "structured/regex_compiler.h"

namespace pagellm::structured {

Expected<Grammar> grammar_from_choices(const std::vector<std::string>& choices) {
  if (choices.empty()) return invalid_argument("[structured] choice needs at least one string");
  GrammarBuilder b;
  std::vector<GrammarBuilder::Expr> alternatives;
  for (const auto& choice : choices) alternatives.push_back(b.literal(choice));
  return b.build(b.add_rule("root", b.alt(std::move(alternatives))));
}

Expected<Grammar> grammar_for(const Constraint& constraint) {
  switch (constraint.kind) {
    case ConstraintKind::kJsonSchema: return grammar_from_json_schema(constraint.text);
    case ConstraintKind::kJsonObject: return grammar_for_any_json_object();
    case ConstraintKind::kRegex: return grammar_from_regex(constraint.text);
    case ConstraintKind::kChoice: return grammar_from_choices(constraint.choices);
    case ConstraintKind::kGrammar: return grammar_from_ebnf(constraint.text);
  }
  return internal_error("[structured] unknown constraint kind");
}

std::string GrammarCompiler::cache_key(const Constraint& constraint) {
  std::string key = std::to_string(static_cast<int>(constraint.kind)) + ":" + constraint.text;
  for (const auto& choice : constraint.choices) key += "\x1f" + std::to_string(choice.size()) + ":" + choice;
  return key;
}

Expected<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::compile(const Constraint& constraint) {
  const std::string key = cache_key(constraint);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = by_key_.find(key); it != by_key_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  PAGELLM_ASSIGN_OR_RETURN(Grammar grammar, grammar_for(constraint));
  auto compiled = std::make_shared<const CompiledGrammar>(std::move(grammar), vocab_);
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = by_key_.find(key); it != by_key_.end()) return it->second->second;
  lru_.emplace_front(key, compiled);
  by_key_[key] = lru_.begin();
  if (lru_.size() > max_cached_) {
    by_key_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return std::shared_ptr<const CompiledGrammar>(compiled);
}

}  // namespace pagellm::structured
