#include "io/mapped_file.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace pagellm {

Expected<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path,
                                                             std::string_view component) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT)
      return not_found("[{}] cannot open {}: {}", component, path, std::strerror(err));
    return invalid_argument("[{}] cannot open {}: {}", component, path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("[{}] {} is not a regular file", component, path);
  }
  const size_t size_bytes = static_cast<size_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size_bytes > 0) {  // mmap rejects length 0
    void* addr = ::mmap(nullptr, size_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return invalid_argument("[{}] cannot map {} ({} bytes): {}", component, path, size_bytes,
                              std::strerror(err));
    }
    data = static_cast<const uint8_t*>(addr);
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  return std::shared_ptr<const MappedFile>(new MappedFile(path, data, size_bytes));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_bytes_);
}

}  // namespace pagellm
