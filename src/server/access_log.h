// Access log: one line per answered request ("POST /v1/chat/completions 200 OK 35.2 ms"), as vLLM's
// HTTP server logs them, by wrapping the API handler and the writer it answers through.
#pragma once

#include "server/http_server.h"

namespace pagellm::server {

HttpHandler with_access_log(HttpHandler inner);

}  // namespace pagellm::server
