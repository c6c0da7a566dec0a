// The built-in chat page of `pagellm serve` (the files of src/server/ui/, compiled into the binary
// as byte arrays by src/server/ui/embed_files.cmake: nothing is read from disk or the network at
// run time). Served without an API key: the page asks the user for the key and sends it on each
// /v1 call itself.
//
//   GET /            index.html
//   GET /ui/NAME     any other file of src/server/ui/ (app.js, style.css, ...)
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "server/http_message.h"

namespace pagellm::server {

struct EmbeddedFile {
  std::string_view name;   // "app.js"
  std::string_view bytes;  // the file's content, as it was at build time
};

// Every file of the page, sorted by name (defined in the generated chat_page_files.cpp).
const std::vector<EmbeddedFile>& chat_page_files();

// The file a GET of `path` serves, or nullptr when `path` is not one of the page's.
const EmbeddedFile* find_chat_page_file(std::string_view path);

// The 200 response for a file of the page (content type from its extension, revalidated on each
// load so an upgraded server is seen at once, with a Content-Security-Policy that lets the page
// reach only its own origin).
HttpResponse chat_page_response(const EmbeddedFile& file);

}  // namespace pagellm::server
