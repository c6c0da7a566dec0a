// SafetensorsWriter (declared in safetensors.h).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/safetensors.h"

namespace pagellm {
namespace {

// The python library's dtype order (its Dtype enum, "increasing alignment"): it lays tensors out
// largest rank first so every tensor stays aligned to its element size once the header is padded
// to 8 bytes. Ranks of the dtypes DType has, in that enum's relative order.
int python_dtype_rank(DType dtype) {
  switch (dtype) {
    case DType::kU8: return 0;
    case DType::kF8E4M3: return 1;  // after U8 (and I8, F8_E5M2), before I16 in the python enum
    case DType::kF16: return 2;
    case DType::kBF16: return 3;
    case DType::kI32: return 4;
    case DType::kF32: return 5;
    case DType::kI64: return 6;
  }
  return -1;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t extent : shape) numel *= extent;
  return numel;
}

}  // namespace

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> bytes) {
  for (int64_t extent : shape) CHECK_MSG(extent >= 0, "tensor '{}' has a negative extent", name);
  const size_t expected_bytes = static_cast<size_t>(numel_of(shape)) * dtype_size_bytes(dtype);
  CHECK_MSG(bytes.size() == expected_bytes, "tensor '{}': {} bytes given, shape and dtype need {}",
            name, bytes.size(), expected_bytes);
  CHECK_MSG(name != "__metadata__" && !entries_.contains(name), "tensor name '{}' used twice",
            name);
  entries_.emplace(std::move(name), Entry{dtype, std::move(shape), std::move(bytes)});
}

std::vector<const std::pair<const std::string, SafetensorsWriter::Entry>*>
SafetensorsWriter::ordered() const {
  std::vector<const std::pair<const std::string, Entry>*> order;
  order.reserve(entries_.size());
  for (const auto& entry : entries_) order.push_back(&entry);
  // entries_ is sorted by name already; a stable sort by rank keeps names ascending within a rank.
  std::stable_sort(order.begin(), order.end(), [](const auto* left, const auto* right) {
    return python_dtype_rank(left->second.dtype) > python_dtype_rank(right->second.dtype);
  });
  return order;
}

// Compact JSON in the python library's key order: "__metadata__" first, then tensors in data
// order, each {"dtype","shape","data_offsets"}; spaces pad it to a multiple of 8 bytes.
std::string SafetensorsWriter::header_json() const {
  std::string header = R"({"__metadata__":{"format":"pt"})";
  size_t offset_bytes = 0;
  for (const auto* entry : ordered()) {
    const auto& [name, tensor] = *entry;
    header +=
        fmt::format(R"(,{}:{{"dtype":"{}","shape":[{}],"data_offsets":[{},{}]}})",
                    nlohmann::json(name).dump(), safetensors_dtype_name(tensor.dtype),
                    fmt::join(tensor.shape, ","), offset_bytes, offset_bytes + tensor.bytes.size());
    offset_bytes += tensor.bytes.size();
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

std::vector<uint8_t> SafetensorsWriter::serialize() const {
  const std::string header = header_json();
  size_t total_bytes = 8 + header.size();
  for (const auto& [name, tensor] : entries_) total_bytes += tensor.bytes.size();
  std::vector<uint8_t> out;
  out.reserve(total_bytes);
  const uint64_t header_bytes = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(header_bytes >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (const auto* entry : ordered()) {
    out.insert(out.end(), entry->second.bytes.begin(), entry->second.bytes.end());
  }
  return out;
}

Status SafetensorsWriter::write(const std::string& path) const {
  const std::string header = header_json();
  const std::string tmp_path = path + ".tmp";
  std::FILE* file = std::fopen(tmp_path.c_str(), "wb");
  if (file == nullptr) {
    return invalid_argument("[safetensors] cannot write {}: {}", tmp_path, std::strerror(errno));
  }
  uint8_t length_bytes[8];
  const uint64_t header_bytes = header.size();
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<uint8_t>(header_bytes >> (8 * i));
  bool ok = std::fwrite(length_bytes, 1, 8, file) == 8 &&
            std::fwrite(header.data(), 1, header.size(), file) == header.size();
  for (const auto* entry : ordered()) {
    const std::vector<uint8_t>& bytes = entry->second.bytes;
    if (!ok) break;
    ok = bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  }
  const int write_errno = errno;
  ok = (std::fclose(file) == 0) && ok;
  if (!ok) {
    std::remove(tmp_path.c_str());
    return invalid_argument("[safetensors] cannot write {}: {}", path, std::strerror(write_errno));
  }
  if (std::rename(tmp_path.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(tmp_path.c_str());
    return invalid_argument("[safetensors] cannot write {}: {}", path, std::strerror(rename_errno));
  }
  return Status::ok();
}

}  // namespace pagellm
