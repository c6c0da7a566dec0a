// A deliberately plain HTTP/1.1 client for the e2e tests: blocking sockets to 127.0.0.1 only, one
// request per connection (Connection: close), chunked bodies decoded, SSE events split out. Raw
// enough to send malformed requests, and to hang up in the middle of a stream.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagellm::e2e {

struct HttpResult {
  int status = 0;  // 0: no response (connection failed or closed early)
  std::string head;  // status line + headers, as received
  std::string body;  // de-chunked
  std::string header(const std::string& lower_name) const;
  nlohmann::json json() const;  // discarded value when the body is not JSON
};

// Opens a TCP connection to 127.0.0.1:port; -1 on failure.
int connect_local(int port, int timeout_ms = 30000);
bool send_all(int fd, const std::string& data);

// Sends `raw` as is and reads the whole response (until the server closes or the body is complete).
HttpResult raw_request(int port, const std::string& raw, int timeout_ms = 60000);
HttpResult http_get(int port, const std::string& path, const std::string& extra_headers = "");
HttpResult http_post(int port, const std::string& path, const std::string& body, const std::string& extra_headers = "");
HttpResult http_post_json(int port, const std::string& path, const nlohmann::json& body,
                          const std::string& extra_headers = "");

// A streaming POST: `on_event` gets each SSE data payload ("{...}" or "[DONE]") as it arrives and
// returns false to hang up at once. The result's body holds the raw de-chunked stream.
HttpResult http_post_stream(int port, const std::string& path, const nlohmann::json& body,
                            const std::function<bool(const std::string& data)>& on_event, int timeout_ms = 300000);

// Splits an SSE byte stream into its data payloads; false if framing is broken (a line that is not
// "data: ..." or an event not ended by a blank line).
bool parse_sse(const std::string& stream, std::vector<std::string>& data);

// The value of one Prometheus sample line "name{labels} value" whose text starts with `prefix`.
std::optional<double> metric_value(const std::string& metrics_text, const std::string& prefix);

}  // namespace pagellm::e2e
