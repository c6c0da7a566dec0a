// EBNF (GBNF-style, as llama.cpp and xgrammar read it) -> grammar, for guided_grammar.
//
//   root   ::= object | "null"          # the start rule is "root"
//   object ::= "{" ( pair ( "," pair )* )? "}"
//   pair   ::= [a-z_]+ ":" [0-9]{1,3}
//
// Rules are `name ::= body`; a body is alternatives (|) of sequences of: "..." or '...' strings
// (escapes \n \t \r \\ \" \' \xHH \uHHHH \UHHHHHHHH), character classes [...] / [^...] over
// code points (UTF-8), '.' (any character), rule names, ( groups ), each optionally followed by
// ? * + {m} {m,} {m,n}. '#' starts a comment. Rules may span lines. Errors give line and column.
// Left-recursive rules are rejected (write `list ::= item ("," item)*`, not `list ::= list "," item`).
#pragma once

#include <string_view>

#include "core/status.h"
#include "structured/grammar.h"

namespace pagellm::structured {

Expected<Grammar> grammar_from_ebnf(std::string_view text, std::string_view root_rule = "root");

}  // namespace pagellm::structured
