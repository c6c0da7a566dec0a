#include "server/chat_page.h"

#include <string>

namespace pagellm::server {

namespace {

constexpr std::string_view kIndexName = "index.html";
constexpr std::string_view kFilePrefix = "/ui/";

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string content_type_of(std::string_view name) {
  if (ends_with(name, ".html")) return "text/html; charset=utf-8";
  if (ends_with(name, ".js")) return "text/javascript; charset=utf-8";
  if (ends_with(name, ".css")) return "text/css; charset=utf-8";
  if (ends_with(name, ".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

const EmbeddedFile* file_named(std::string_view name) {
  for (const EmbeddedFile& file : chat_page_files())
    if (file.name == name) return &file;
  return nullptr;
}

}  // namespace

const EmbeddedFile* find_chat_page_file(std::string_view path) {
  if (path == "/") return file_named(kIndexName);
  if (path.substr(0, kFilePrefix.size()) != kFilePrefix) return nullptr;
  const std::string_view name = path.substr(kFilePrefix.size());
  return name == kIndexName ? nullptr : file_named(name);
}

HttpResponse chat_page_response(const EmbeddedFile& file) {
  HttpResponse response;
  response.content_type = content_type_of(file.name);
  response.body = std::string(file.bytes);
  response.extra_headers = {
      {"Cache-Control", "no-cache"},
      {"X-Content-Type-Options", "nosniff"},
      {"Referrer-Policy", "no-referrer"},
      // Model output is rendered as HTML (escaped first, by ui/markdown.js); this is the second
      // wall: no inline script, no other origin, no framing.
      {"Content-Security-Policy",
       "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
  };
  return response;
}

}  // namespace pagellm::server
