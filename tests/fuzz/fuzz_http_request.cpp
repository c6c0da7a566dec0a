// libFuzzer harness for the HTTP request reader of `pagellm serve`: arbitrary bytes are what a
// client sends on one connection (pipelined requests, bodies, garbage), read by the real
// HttpConnection over a socketpair and answered by a small handler. Any crash, sanitizer report,
// hang or leak is a bug; 4xx answers are fine. Also checks invariants a smuggling fix relies on:
// a request that passes has exactly one Host (HTTP/1.1), agreeing lengths, no Transfer-Encoding,
// and a body of exactly its Content-Length; the body budget is whole again after the connection.
//
// Not built by default: scripts/fuzz.sh http_request (clang, -fsanitize=fuzzer,address,undefined).
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include "server/http_connection.h"
#include "server/http_message.h"

using namespace pagellm::server;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

HttpResponse error_response(int status, const std::string& message) {
  HttpResponse response;
  response.status = status;
  response.body = "{\"error\":\"" + message.substr(0, 16) + "\"}";
  return response;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  // The head parser alone, on everything before the first empty line.
  const size_t head_end = input.find("\r\n\r\n");
  if (auto parsed = parse_request_head(std::string_view(input).substr(0, head_end)); parsed.has_value())
    (void)body_framing(*parsed);

  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 0;
  // The client side: sends the input, stops sending, reads whatever comes back until closed.
  std::thread client([fd = fds[1], &input] {
    size_t sent = 0;
    while (sent < input.size()) {
      const ssize_t n = ::send(fd, input.data() + sent, input.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    ::shutdown(fd, SHUT_WR);
    char sink[4096];
    while (::recv(fd, sink, sizeof(sink), 0) > 0) {
    }
    ::close(fd);
  });
  HttpLimits limits;
  limits.max_head_bytes = 2048;
  limits.max_body_bytes = 4096;
  limits.idle_timeout_ms = limits.head_timeout_ms = limits.body_timeout_ms = 1000;
  ServerLoad load(6000);
  {
    HttpConnection connection(fds[0], limits, load, error_response);
    // Screens out one path before its body is read, as the API's router does for 401/404/405.
    const HeadScreenFn screen = [](const HttpRequest& head) -> std::optional<HttpResponse> {
      if (head.path == "/refused") return error_response(404, "no route");
      return std::nullopt;
    };
    for (int i = 0; i < 64; ++i) {
      HttpRequest request;
      if (connection.read_request(request, screen) != HttpConnection::ReadOutcome::kRequest) break;
      check(request.path != "/refused");
      check(request.minor_version == 0 || request.count_headers("host") == 1);
      check(request.count_headers("transfer-encoding") == 0);
      auto framing = body_framing(request);
      check(framing.has_value() && framing->content_length == request.body.size());
      check(load.body_budget.used_bytes() == request.body.size());
      connection.begin_exchange(request);
      HttpResponse response;
      response.body = std::string(std::string_view(request.body).substr(0, 64));
      connection.respond(response);
      const bool again = connection.finish_exchange();
      request = HttpRequest();
      connection.release_body();
      if (!again) break;
    }
  }
  client.join();
  check(load.body_budget.used_bytes() == 0);
  return 0;
}
