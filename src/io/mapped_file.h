// MappedFile: a whole file mapped read-only into memory (POSIX mmap), unmapped on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace pagellm {

class MappedFile {
 public:
  // "[<component>] cannot open /x/y: No such file or directory"; an empty file maps to size 0,
  // data nullptr.
  static Expected<std::shared_ptr<const MappedFile>> open(const std::string& path,
                                                          std::string_view component = "io");

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size_bytes() const { return size_bytes_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size_bytes)
      : path_(std::move(path)), data_(data), size_bytes_(size_bytes) {}

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_bytes_ = 0;
};

}  // namespace pagellm
