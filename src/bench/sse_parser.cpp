#include "bench/sse_parser.h"

namespace pagellm::bench {

void SseParser::feed(std::string_view bytes, EventSink& sink) {
  while (!bytes.empty()) {
    size_t eol = bytes.find('\n');
    if (eol == std::string_view::npos) {
      partial_line_.append(bytes);
      return;
    }
    if (partial_line_.empty()) {
      // Common case: the whole line is inside this read, no copy.
      handle_line(bytes.substr(0, eol), sink);
    } else {
      partial_line_.append(bytes.substr(0, eol));
      std::string line = std::move(partial_line_);
      partial_line_.clear();
      handle_line(line, sink);
    }
    bytes.remove_prefix(eol + 1);
  }
}

void SseParser::handle_line(std::string_view line, EventSink& sink) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) {
    if (has_data_) {
      sink.on_event(data_);
      data_.clear();
      has_data_ = false;
    }
    return;
  }
  if (line.rfind("data:", 0) != 0) return;  // comments and other fields carry nothing we use
  std::string_view value = line.substr(5);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (has_data_) data_.push_back('\n');
  data_.append(value);
  has_data_ = true;
}

}  // namespace pagellm::bench
