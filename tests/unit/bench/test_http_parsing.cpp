// The wire layers of the bench client: base URL, HTTP response framing, SSE framing, chunk meaning.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bench/base_url.h"
#include "bench/http_response_parser.h"
#include "bench/openai_stream.h"
#include "bench/sse_parser.h"

namespace pagellm::bench {
namespace {

struct CollectBody : HttpResponseParser::BodySink {
  std::string body;
  void on_body(std::string_view bytes) override { body.append(bytes); }
};

struct CollectEvents : SseParser::EventSink {
  std::vector<std::string> events;
  void on_event(std::string_view data) override { events.emplace_back(data); }
};

// Feeds `wire` in pieces of `piece` bytes (1 = byte by byte: every split point is exercised).
Status feed_in_pieces(HttpResponseParser& parser, const std::string& wire, size_t piece, CollectBody& sink) {
  for (size_t i = 0; i < wire.size(); i += piece) {
    Status st = parser.feed(std::string_view(wire).substr(i, piece), sink);
    if (!st.is_ok()) return st;
  }
  return Status::ok();
}

TEST(BaseUrl, ParsesHostPortAndPrefix) {
  auto url = parse_base_url("http://localhost:8123/api/");
  ASSERT_TRUE(url.has_value()) << url.status().message();
  EXPECT_EQ(url->host, "localhost");
  EXPECT_EQ(url->port, 8123);
  EXPECT_EQ(url->path_for("/v1/completions"), "/api/v1/completions");
  EXPECT_EQ(parse_base_url("http://127.0.0.1")->port, 80);
  EXPECT_EQ(parse_base_url("http://10.1.2.3:9000")->path_for("/v1/completions"), "/v1/completions");
}

TEST(BaseUrl, RejectsWhatItCannotReach) {
  EXPECT_FALSE(parse_base_url("https://127.0.0.1:8000").has_value());
  EXPECT_FALSE(parse_base_url("127.0.0.1:8000").has_value());
  EXPECT_FALSE(parse_base_url("http://example.com:8000").has_value());
  EXPECT_FALSE(parse_base_url("http://127.0.0.1:99999").has_value());
  EXPECT_NE(parse_base_url("http://example.com").status().message().find("[bench]"), std::string::npos);
}

TEST(HttpResponseParser, ChunkedBodyAtEverySplitPoint) {
  const std::string wire =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
      "6\r\nhello \r\n"
      "b;ext=1\r\nchunked wor\r\n"
      "2\r\nld\r\n"
      "0\r\nX-Trailer: 1\r\n\r\n";
  for (size_t piece : {1, 2, 3, 7, 1000}) {
    HttpResponseParser parser;
    CollectBody sink;
    ASSERT_TRUE(feed_in_pieces(parser, wire, piece, sink).is_ok()) << piece;
    EXPECT_TRUE(parser.is_complete());
    EXPECT_EQ(parser.status_code(), 200);
    EXPECT_EQ(parser.content_type(), "text/event-stream");
    EXPECT_TRUE(parser.keep_alive());
    EXPECT_EQ(sink.body, "hello chunked world");
  }
}

TEST(HttpResponseParser, ContentLengthErrorBody) {
  const std::string wire =
      "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 11\r\nConnection: close\r\n\r\n"
      "{\"e\":\"bad\"}";
  HttpResponseParser parser;
  CollectBody sink;
  ASSERT_TRUE(feed_in_pieces(parser, wire, 5, sink).is_ok());
  EXPECT_TRUE(parser.is_complete());
  EXPECT_EQ(parser.status_code(), 500);
  EXPECT_FALSE(parser.keep_alive());
  EXPECT_EQ(sink.body, "{\"e\":\"bad\"}");
}

TEST(HttpResponseParser, BodyUntilCloseAndCutOffStreams) {
  HttpResponseParser until_close;
  CollectBody sink;
  ASSERT_TRUE(until_close.feed("HTTP/1.0 200 OK\r\n\r\nabc", sink).is_ok());
  EXPECT_FALSE(until_close.is_complete());
  EXPECT_TRUE(until_close.on_eof().is_ok());
  EXPECT_EQ(sink.body, "abc");
  EXPECT_FALSE(until_close.keep_alive());

  HttpResponseParser chunked;
  ASSERT_TRUE(chunked.feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", sink).is_ok());
  EXPECT_FALSE(chunked.on_eof().is_ok());

  HttpResponseParser nothing;
  EXPECT_NE(nothing.on_eof().message().find("before responding"), std::string::npos);
}

TEST(HttpResponseParser, RejectsGarbage) {
  CollectBody sink;
  HttpResponseParser bad_status;
  EXPECT_FALSE(bad_status.feed("SMTP ready\r\n\r\n", sink).is_ok());
  HttpResponseParser bad_chunk;
  EXPECT_FALSE(bad_chunk.feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", sink).is_ok());
}

TEST(SseParser, FramesEventsAcrossArbitrarySplits) {
  const std::string body =
      "data: {\"a\":1}\n\n"
      ": keep-alive comment\n\n"
      "event: message\r\ndata: {\"b\":2}\r\n\r\n"
      "data: line1\ndata:line2\n\n"
      "data: [DONE]\n\n";
  for (size_t piece : {1, 4, 1000}) {
    SseParser parser;
    CollectEvents sink;
    for (size_t i = 0; i < body.size(); i += piece) parser.feed(std::string_view(body).substr(i, piece), sink);
    ASSERT_EQ(sink.events.size(), 4u) << piece;
    EXPECT_EQ(sink.events[0], "{\"a\":1}");
    EXPECT_EQ(sink.events[1], "{\"b\":2}");
    EXPECT_EQ(sink.events[2], "line1\nline2");
    EXPECT_EQ(sink.events[3], "[DONE]");
    EXPECT_FALSE(parser.has_partial_event());
  }
  SseParser partial;
  CollectEvents sink;
  partial.feed("data: {\"x\"", sink);
  EXPECT_TRUE(partial.has_partial_event());
  EXPECT_TRUE(sink.events.empty());
}

TEST(StreamChunk, TellsTokensUsageErrorsAndDone) {
  StreamChunk token = parse_stream_chunk(R"({"choices":[{"index":0,"text":" hi"}]})");
  EXPECT_TRUE(token.has_choices);
  EXPECT_FALSE(token.completion_tokens.has_value());
  StreamChunk usage = parse_stream_chunk(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7}})");
  EXPECT_FALSE(usage.has_choices);
  EXPECT_EQ(usage.completion_tokens.value_or(-1), 7);
  StreamChunk null_usage = parse_stream_chunk(R"({"choices":[{"delta":{}}],"usage":null})");
  EXPECT_TRUE(null_usage.has_choices);
  EXPECT_FALSE(null_usage.completion_tokens.has_value());
  EXPECT_TRUE(parse_stream_chunk("[DONE]").is_done);
  EXPECT_NE(parse_stream_chunk("{oops").error.value_or("").find("malformed SSE event"), std::string::npos);
  EXPECT_NE(parse_stream_chunk(R"({"error":{"message":"too long"}})").error.value_or("").find("too long"),
            std::string::npos);
}

TEST(RequestBody, CompletionsWithIdsAndChatWithText) {
  BenchRequest ids;
  ids.prompt_token_ids = {5, 6, 7};
  ids.output_len = 12;
  auto body = nlohmann::json::parse(make_request_body(ids, {"m", Endpoint::kCompletions, true}));
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["prompt"], nlohmann::json({5, 6, 7}));
  EXPECT_EQ(body["max_tokens"], 12);
  EXPECT_EQ(body["temperature"], 0);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);

  BenchRequest text;
  text.prompt_text = "hello there";
  text.output_len = 3;
  auto chat = nlohmann::json::parse(make_request_body(text, {"m", Endpoint::kChatCompletions, false}));
  EXPECT_EQ(chat["messages"][0]["role"], "user");
  EXPECT_EQ(chat["messages"][0]["content"], "hello there");
  EXPECT_FALSE(chat.contains("ignore_eos"));
  EXPECT_FALSE(chat.contains("prompt"));

  RequestOptions constrained{"m", Endpoint::kChatCompletions, false};
  constrained.extra_body = {{"response_format", {{"type", "json_object"}}}, {"temperature", 1}};
  auto extra = nlohmann::json::parse(make_request_body(text, constrained));
  EXPECT_EQ(extra["response_format"]["type"], "json_object");
  EXPECT_EQ(extra["temperature"], 1) << "--extra-body wins over the defaults";
}

}  // namespace
}  // namespace pagellm::bench
