// Helpers for output-parser tests: parse a text whole, then streamed in every two-piece split and
// byte by byte, and check that every stream is well-formed and reassembles to the whole result.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/tool_parser.h"

namespace pagellm::server::test {

using Json = nlohmann::ordered_json;
using ParserFactory = std::function<std::unique_ptr<OutputParser>(ToolCallIdFn)>;

// Ids call_0, call_1, ... per parser, so the whole and the streamed results compare equal.
inline ToolCallIdFn counting_ids() {
  auto next = std::make_shared<int>(0);
  return [next] { return "call_" + std::to_string((*next)++); };
}

struct ExpectedCall {
  std::string name;
  std::string arguments;  // JSON text; compared as JSON
};

struct ExpectedMessage {
  std::string content;
  std::vector<ExpectedCall> calls;
  std::string reasoning;
};

// Feeds `pieces` one by one and checks the deltas: a call's first delta has its id and name and
// the next index; later pieces name an existing call and carry no id.
inline ParsedMessage parse_streamed(const ParserFactory& factory, const std::vector<std::string>& pieces,
                                    const std::string& where) {
  std::unique_ptr<OutputParser> parser = factory(counting_ids());
  ParsedMessage message;
  auto check = [&](const MessageDelta& delta) {
    for (const ToolCallDelta& piece : delta.tool_calls) {
      if (!piece.id.empty()) {
        EXPECT_EQ(piece.index, static_cast<int>(message.tool_calls.size())) << where;
        EXPECT_FALSE(piece.name.empty()) << where;
      } else {
        EXPECT_LT(piece.index, static_cast<int>(message.tool_calls.size())) << where;
        EXPECT_TRUE(piece.name.empty()) << where;
      }
      MessageDelta one;
      one.tool_calls.push_back(piece);
      message.apply(one);
    }
    MessageDelta text = delta;
    text.tool_calls.clear();
    message.apply(text);
  };
  for (const std::string& piece : pieces) {
    MessageDelta delta;
    parser->feed(piece, delta);
    check(delta);
  }
  MessageDelta last;
  parser->finish(last);
  check(last);
  return message;
}

inline void expect_same(const ParsedMessage& got, const ParsedMessage& want, const std::string& where) {
  EXPECT_EQ(got.content, want.content) << where;
  EXPECT_EQ(got.reasoning, want.reasoning) << where;
  ASSERT_EQ(got.tool_calls.size(), want.tool_calls.size()) << where;
  for (size_t i = 0; i < got.tool_calls.size(); ++i) {
    EXPECT_EQ(got.tool_calls[i].id, want.tool_calls[i].id) << where;
    EXPECT_EQ(got.tool_calls[i].name, want.tool_calls[i].name) << where;
    EXPECT_EQ(got.tool_calls[i].arguments, want.tool_calls[i].arguments) << where;
  }
}

// The whole-text result must be `expected`; every split of the text must stream to it.
inline void expect_parses(const ParserFactory& factory, const std::string& text, const ExpectedMessage& expected) {
  std::unique_ptr<OutputParser> parser = factory(counting_ids());
  const ParsedMessage whole = parse_whole(*parser, text);
  EXPECT_EQ(whole.content, expected.content) << text;
  EXPECT_EQ(whole.reasoning, expected.reasoning) << text;
  ASSERT_EQ(whole.tool_calls.size(), expected.calls.size()) << text;
  for (size_t i = 0; i < expected.calls.size(); ++i) {
    EXPECT_EQ(whole.tool_calls[i].id, "call_" + std::to_string(i));
    EXPECT_EQ(whole.tool_calls[i].name, expected.calls[i].name) << text;
    const Json arguments = Json::parse(whole.tool_calls[i].arguments, nullptr, false);
    EXPECT_FALSE(arguments.is_discarded()) << "arguments are not JSON: " << whole.tool_calls[i].arguments;
    EXPECT_EQ(arguments, Json::parse(expected.calls[i].arguments)) << text;
  }
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const std::string where = text + "\n  split at byte " + std::to_string(cut);
    expect_same(parse_streamed(factory, {text.substr(0, cut), text.substr(cut)}, where), whole, where);
    if (::testing::Test::HasFailure()) return;  // one report per text is enough
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  expect_same(parse_streamed(factory, bytes, text + "\n  byte by byte"), whole, text + "\n  byte by byte");
}

}  // namespace pagellm::server::test
