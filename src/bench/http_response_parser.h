// Incremental HTTP/1.1 response parser: status line, headers, then a body framed by
// Content-Length, chunked transfer coding, or the end of the connection. Bytes arrive in whatever
// pieces the socket hands over; the decoded body is passed on as it comes, so a streamed (SSE)
// body is seen event by event rather than at the end.
//
//   "HTTP/1.1 200 OK\r\n" headers "\r\n" body
//   chunked body:  HEXSIZE[;ext]\r\n DATA \r\n ... 0\r\n [trailers] \r\n
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace pagellm::bench {

class HttpResponseParser {
 public:
  // Receives decoded body bytes, in order, possibly in many pieces.
  class BodySink {
   public:
    virtual ~BodySink() = default;
    virtual void on_body(std::string_view bytes) = 0;
  };

  // Feeds raw bytes from the socket. Bytes after the end of the response are ignored (the client
  // never pipelines). A non-ok Status means the response is malformed.
  Status feed(std::string_view bytes, BodySink& sink);
  // The peer closed the connection: completes a body framed by the close, else an error.
  Status on_eof();

  bool has_headers() const { return state_ > State::kHeaders; }
  bool is_complete() const { return state_ == State::kDone; }
  int status_code() const { return status_code_; }
  const std::string& content_type() const { return content_type_; }
  // Whether the connection may carry another request after this response.
  bool keep_alive() const { return keep_alive_ && body_mode_ != BodyMode::kUntilClose; }

 private:
  enum class State { kHeaders, kBody, kChunkSize, kChunkData, kChunkDataEnd, kTrailer, kDone };
  enum class BodyMode { kNone, kContentLength, kChunked, kUntilClose };

  Status parse_head(std::string_view head);
  Status parse_header_line(std::string_view line);
  Status feed_chunked(std::string_view& bytes, BodySink& sink);
  // Takes one CRLF/LF-terminated line from `bytes` into line_; true when the line is complete.
  bool take_line(std::string_view& bytes);

  State state_ = State::kHeaders;
  BodyMode body_mode_ = BodyMode::kUntilClose;
  std::string head_;  // status line + headers, until the blank line
  std::string line_;  // partial chunk-size or trailer line
  int status_code_ = 0;
  bool keep_alive_ = true;
  std::string content_type_;
  uint64_t body_remaining_bytes_ = 0;  // Content-Length left, or bytes left in the current chunk
};

}  // namespace pagellm::bench
