# Writes OUT, a C++ file that holds every file of DIR (the chat page: *.html, *.css, *.js, *.svg) as
# a byte array, and defines pagellm::server::chat_page_files() over them (server/chat_page.h).
# Run at build time: cmake -DDIR=... -DOUT=... -P embed_files.cmake
file(GLOB files RELATIVE ${DIR} ${DIR}/*.html ${DIR}/*.css ${DIR}/*.js ${DIR}/*.svg)
list(SORT files)
set(arrays "")
set(entries "")
set(index 0)
foreach(name IN LISTS files)
  file(READ ${DIR}/${name} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "((0x..,){24})" "\\1\n" bytes "${bytes}")
  # A trailing 0 keeps the array non-empty for an empty file; the view leaves it out.
  string(APPEND arrays "const unsigned char kFile${index}[] = {\n${bytes}0};\n")
  string(APPEND entries "      {\"${name}\", {reinterpret_cast<const char*>(kFile${index}), sizeof(kFile${index}) - 1}},\n")
  math(EXPR index "${index} + 1")
endforeach()
file(WRITE ${OUT}.tmp "// Generated from src/server/ui/ by src/server/ui/embed_files.cmake at build time: do not edit.
#include \"server/chat_page.h\"

namespace pagellm::server {
namespace {
${arrays}}  // namespace

const std::vector<EmbeddedFile>& chat_page_files() {
  static const std::vector<EmbeddedFile> files = {
${entries}  };
  return files;
}

}  // namespace pagellm::server
")
# Only a changed file is rewritten, so an unchanged page recompiles nothing.
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
