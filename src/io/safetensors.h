// Checkpoint (reads one or many .safetensors files, memory-mapped) and SafetensorsWriter.
//
// File layout (https://github.com/huggingface/safetensors):
//
//   [0, 8)            u64 little-endian N = header length in bytes
//   [8, 8 + N)        UTF-8 JSON object: {"__metadata__": {str: str}, "name": {"dtype": "BF16",
//                     "shape": [a, b], "data_offsets": [begin, end]}, ...}, padded with spaces
//   [8 + N, size)     data section; a tensor's bytes are [8 + N + begin, 8 + N + end), row-major,
//                     little-endian
//
// Every offset and size in the header is checked against the file when it is opened, so a
// truncated or corrupt file is a one-line error, never a read past the mapping.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace pagellm {

class MappedFile;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // [] for a scalar
  // Points into the read-only mapping owned by the Checkpoint; valid while the Checkpoint (or a
  // copy of it) lives. Aligned to the element size for files written like the python library
  // writes them (header padded to 8, tensors sorted by alignment); other writers may not align,
  // so read through memcpy or check the address before casting.
  const void* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // the .safetensors path it came from
};

// The tensors of a model folder: model.safetensors, or the shards listed by
// model.safetensors.index.json. Cheap to copy (the mappings are shared).
class Checkpoint {
 public:
  // model.safetensors.index.json if present, else model.safetensors, else every *.safetensors.
  static Expected<Checkpoint> open_dir(const std::string& model_dir);
  // One .safetensors file, or a *.index.json that names shards beside it.
  static Expected<Checkpoint> open_file(const std::string& path);

  // nullptr if absent or stored in a dtype pagellm cannot hold (get() says which).
  const TensorInfo* find(std::string_view name) const;
  // Sorted names of the tensors find() returns.
  std::vector<std::string> names() const;
  size_t size() const { return tensors_.size(); }
  // Where the tensors came from (a folder or a file), for messages.
  const std::string& source() const { return source_; }

  // Validated fetch: "[checkpoint] tensor 'x' has shape [a, b], expected [c, d]", missing tensor,
  // unsupported dtype. The overload with a dtype also rejects any other dtype.
  Expected<const TensorInfo*> get(std::string_view name,
                                  const std::vector<int64_t>& expected_shape) const;
  Expected<const TensorInfo*> get(std::string_view name, const std::vector<int64_t>& expected_shape,
                                  DType expected_dtype) const;

 private:
  Status add_file(const std::string& path);

  std::string source_;
  std::vector<std::shared_ptr<const MappedFile>> files_;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  // Tensors stored in a dtype DType cannot hold (F64, I8, F8_E5M2, ...): name -> "F64 in <file>".
  std::map<std::string, std::string, std::less<>> unsupported_;
};

// Writes a .safetensors file whose bytes depend only on what was added: tensors ordered like the
// python library orders them (by dtype alignment, largest first, then by name), offsets packed,
// compact JSON header with "__metadata__": {"format": "pt"} first, padded with spaces to a
// multiple of 8 bytes. For the same tensors this gives the bytes safetensors.torch.save_file
// writes with metadata={"format": "pt"} (what transformers' save_pretrained passes).
class SafetensorsWriter {
 public:
  // `bytes` must hold exactly numel(shape) * dtype_size_bytes(dtype) bytes; names must be unique
  // (both are caller bugs, checked).
  void add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  // The whole file as bytes (header + data).
  std::vector<uint8_t> serialize() const;
  // Writes to `path` through a temporary file and a rename, so a crash leaves no half file.
  Status write(const std::string& path) const;

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<const std::pair<const std::string, Entry>*> ordered() const;
  std::string header_json() const;

  std::map<std::string, Entry> entries_;
};

// "F32", "BF16", ... as safetensors spells the dtype.
std::string_view safetensors_dtype_name(DType dtype);

}  // namespace pagellm
