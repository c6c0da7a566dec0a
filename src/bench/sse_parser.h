// Server-sent events framing (the text/event-stream body of a streamed completion):
//
//   data: {"choices":[...]}\n
//   \n                          <- a blank line ends the event
//   : comment\n                 <- ignored, as are event:/id:/retry: fields
//
// Several "data:" lines in one event are joined with '\n'. Lines end with "\n" or "\r\n".
// Bytes arrive in arbitrary pieces; only complete events are passed on.
#pragma once

#include <string>
#include <string_view>

namespace pagellm::bench {

class SseParser {
 public:
  class EventSink {
   public:
    virtual ~EventSink() = default;
    virtual void on_event(std::string_view data) = 0;
  };

  void feed(std::string_view bytes, EventSink& sink);
  // True when bytes of an unfinished event are held (a stream that ends here was cut short).
  bool has_partial_event() const { return !partial_line_.empty() || has_data_; }

 private:
  void handle_line(std::string_view line, EventSink& sink);

  std::string partial_line_;  // a line split across feeds
  std::string data_;          // data lines of the current event
  bool has_data_ = false;
};

}  // namespace pagellm::bench
