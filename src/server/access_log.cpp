#include "server/access_log.h"

#include <chrono>

#include "core/logging.h"

namespace pagellm::server {

namespace {

// Forwards everything to the connection's writer and remembers the status it was given.
class StatusRecorder final : public ResponseWriter {
 public:
  explicit StatusRecorder(ResponseWriter& inner) : inner_(inner) {}
  bool respond(const HttpResponse& response) override {
    status_ = response.status;
    return inner_.respond(response);
  }
  bool start_stream(int status, std::string_view content_type, const HttpHeaders& extra_headers) override {
    status_ = status;
    return inner_.start_stream(status, content_type, extra_headers);
  }
  bool write_chunk(std::string_view data) override { return inner_.write_chunk(data); }
  bool end_stream() override { return inner_.end_stream(); }
  bool client_gone() override { return inner_.client_gone(); }
  int status() const { return status_; }

 private:
  ResponseWriter& inner_;
  int status_ = 0;  // 0: the handler never answered (the client left first)
};

}  // namespace

HttpHandler with_access_log(HttpHandler inner) {
  return [inner = std::move(inner)](const HttpRequest& request, ResponseWriter& writer) {
    const auto started = std::chrono::steady_clock::now();
    StatusRecorder recorder(writer);
    inner(request, recorder);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    LOG_INFO("{} {} {} {} {:.1f} ms{}", request.method, request.path, recorder.status(),
             reason_phrase(recorder.status()), ms, recorder.client_gone() ? " (client gone)" : "");
  };
}

}  // namespace pagellm::server
