#include "io/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "io/mapped_file.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The python library refuses headers over 100 MB; a real header is a few hundred KB at most.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kIndexFileName = "model.safetensors.index.json";

// A dtype string as safetensors spells it: the DType it maps to, if any, and its element width in
// bits (0 = sub-byte packed formats whose byte span we do not check).
struct DTypeSpec {
  std::string_view name;
  std::optional<DType> dtype;
  int bits;
};
constexpr DTypeSpec kDTypeSpecs[] = {
    {"F32", DType::kF32, 32},         {"BF16", DType::kBF16, 16},
    {"F16", DType::kF16, 16},         {"I32", DType::kI32, 32},
    {"I64", DType::kI64, 64},         {"U8", DType::kU8, 8},
    {"BOOL", std::nullopt, 8},        {"I8", std::nullopt, 8},
    {"I16", std::nullopt, 16},        {"U16", std::nullopt, 16},
    {"U32", std::nullopt, 32},        {"U64", std::nullopt, 64},
    {"F64", std::nullopt, 64},        {"C64", std::nullopt, 64},
    {"F8_E5M2", std::nullopt, 8},     {"F8_E4M3", DType::kF8E4M3, 8},
    {"F8_E8M0", std::nullopt, 8},     {"F8_E4M3FNUZ", std::nullopt, 8},
    {"F8_E5M2FNUZ", std::nullopt, 8}, {"F4", std::nullopt, 0},
    {"F6_E2M3", std::nullopt, 0},     {"F6_E3M2", std::nullopt, 0},
};

const DTypeSpec* find_dtype_spec(std::string_view name) {
  for (const DTypeSpec& spec : kDTypeSpecs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// A short, one-line rendering of a JSON value for error messages.
std::string short_dump(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

bool read_u64(const json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(value.get<int64_t>());
    return true;
  }
  return false;
}

struct ParsedTensor {
  TensorInfo info;
  std::string unsupported_dtype;  // non-empty: the dtype string DType cannot hold
};

// Checks one header entry against the data section [data_begin, data_begin + data_size_bytes).
Expected<ParsedTensor> parse_tensor_entry(const MappedFile& file, const std::string& name,
                                          const json& entry, uint64_t data_begin) {
  const std::string& path = file.path();
  const uint64_t data_size_bytes = file.size_bytes() - data_begin;
  if (!entry.is_object()) {
    return invalid_argument("[safetensors] {}: tensor '{}' entry must be an object, got {}", path,
                            name, short_dump(entry));
  }
  const auto dtype_it = entry.find("dtype");
  const auto shape_it = entry.find("shape");
  const auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    return invalid_argument("[safetensors] {}: tensor '{}' has no string 'dtype'", path, name);
  }
  const std::string dtype_name = dtype_it->get<std::string>();
  const DTypeSpec* spec = find_dtype_spec(dtype_name);
  if (spec == nullptr) {
    return invalid_argument("[safetensors] {}: tensor '{}' has unknown dtype '{}'", path, name,
                            dtype_name);
  }
  if (shape_it == entry.end() || !shape_it->is_array()) {
    return invalid_argument("[safetensors] {}: tensor '{}' has no 'shape' list", path, name);
  }
  ParsedTensor parsed;
  TensorInfo& info = parsed.info;
  info.name = name;
  info.file = path;
  uint64_t numel = 1;
  bool numel_overflowed = false;
  for (const json& dim : *shape_it) {
    uint64_t extent = 0;
    if (!read_u64(dim, &extent) || extent > static_cast<uint64_t>(INT64_MAX)) {
      return invalid_argument("[safetensors] {}: tensor '{}' has a bad shape {}", path, name,
                              short_dump(*shape_it));
    }
    info.shape.push_back(static_cast<int64_t>(extent));
    numel_overflowed |= __builtin_mul_overflow(numel, extent, &numel);
  }
  uint64_t begin = 0, end = 0;
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !read_u64((*offsets_it)[0], &begin) || !read_u64((*offsets_it)[1], &end)) {
    return invalid_argument(
        "[safetensors] {}: tensor '{}' needs 'data_offsets' [begin, end], got {}", path, name,
        offsets_it == entry.end() ? "nothing" : short_dump(*offsets_it));
  }
  if (end < begin) {
    return invalid_argument(
        "[safetensors] {}: tensor '{}' has data_offsets [{}, {}] that end before they begin", path,
        name, begin, end);
  }
  if (end > data_size_bytes) {
    return invalid_argument(
        "[safetensors] {}: tensor '{}' ends at byte {} past the end of the file ({} bytes); the "
        "file is truncated or corrupt",
        path, name, data_begin + end, file.size_bytes());
  }
  const uint64_t span_bytes = end - begin;
  if (spec->bits > 0) {
    uint64_t expected_bytes = 0;
    if (numel_overflowed ||
        __builtin_mul_overflow(numel, static_cast<uint64_t>(spec->bits / 8), &expected_bytes) ||
        expected_bytes != span_bytes) {
      return invalid_argument(
          "[safetensors] {}: tensor '{}' has shape {} and dtype {} ({} bytes) but its data_offsets "
          "span {} bytes",
          path, name, shape_string(info.shape), dtype_name,
          numel_overflowed ? std::string("overflowing") : std::to_string(numel * (spec->bits / 8)),
          span_bytes);
    }
  }
  info.data = file.data() + data_begin + begin;
  info.nbytes = static_cast<size_t>(span_bytes);
  if (spec->dtype) {
    info.dtype = *spec->dtype;
  } else {
    parsed.unsupported_dtype = dtype_name;
  }
  return parsed;
}

// Parses and validates the header of a mapped .safetensors file.
Expected<std::vector<ParsedTensor>> parse_safetensors(const MappedFile& file) {
  const std::string& path = file.path();
  const uint64_t file_bytes = file.size_bytes();
  if (file_bytes < 8) {
    return invalid_argument(
        "[safetensors] {}: file is {} bytes, too short to hold the 8-byte header length "
        "(truncated or not a safetensors file)",
        path, file_bytes);
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | file.data()[i];
  if (header_bytes > file_bytes - 8) {
    return invalid_argument(
        "[safetensors] {}: header length {} is larger than the rest of the file ({} bytes); the "
        "file is truncated or not a safetensors file",
        path, header_bytes, file_bytes - 8);
  }
  if (header_bytes > kMaxHeaderBytes) {
    return invalid_argument("[safetensors] {}: header length {} is over the {} byte limit", path,
                            header_bytes, kMaxHeaderBytes);
  }
  const char* header_begin = reinterpret_cast<const char*>(file.data() + 8);
  json header;
  try {
    header = json::parse(header_begin, header_begin + header_bytes);
  } catch (const json::exception& error) {
    return invalid_argument("[safetensors] {}: header is not valid JSON ({})", path, error.what());
  }
  if (!header.is_object()) {
    return invalid_argument("[safetensors] {}: header must be a JSON object, got {}", path,
                            short_dump(header));
  }
  const uint64_t data_begin = 8 + header_bytes;
  std::vector<ParsedTensor> tensors;
  tensors.reserve(header.size());
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;  // free-form strings; nothing we need
    PAGELLM_ASSIGN_OR_RETURN(ParsedTensor parsed,
                             parse_tensor_entry(file, name, entry, data_begin));
    tensors.push_back(std::move(parsed));
  }
  return tensors;
}

Expected<json> read_json_file(const std::string& path, std::string_view component) {
  std::ifstream in(path);
  if (!in) return not_found("[{}] cannot open {}", component, path);
  try {
    return json::parse(in);
  } catch (const json::exception& error) {
    return invalid_argument("[{}] {}: not valid JSON ({})", component, path, error.what());
  }
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  for (const DTypeSpec& spec : kDTypeSpecs) {
    if (spec.dtype == dtype) return spec.name;
  }
  return "?";
}

Status Checkpoint::add_file(const std::string& path) {
  auto mapped = MappedFile::open(path, "safetensors");
  if (!mapped) return mapped.status();
  PAGELLM_ASSIGN_OR_RETURN(std::vector<ParsedTensor> parsed, parse_safetensors(**mapped));
  for (ParsedTensor& tensor : parsed) {
    const std::string& name = tensor.info.name;
    const TensorInfo* earlier = find(name);
    const auto earlier_unsupported = unsupported_.find(name);
    if (earlier != nullptr || earlier_unsupported != unsupported_.end()) {
      return invalid_argument("[safetensors] tensor '{}' is in both {} and {}", name,
                              earlier != nullptr ? earlier->file : earlier_unsupported->second,
                              path);
    }
    if (!tensor.unsupported_dtype.empty()) {
      unsupported_.emplace(name, fmt::format("{} in {}", tensor.unsupported_dtype, path));
    } else {
      tensors_.emplace(name, std::move(tensor.info));
    }
  }
  files_.push_back(std::move(mapped).value());
  return Status::ok();
}

Expected<Checkpoint> Checkpoint::open_file(const std::string& path) {
  Checkpoint checkpoint;
  checkpoint.source_ = path;
  if (!ends_with(path, ".index.json")) {
    PAGELLM_RETURN_IF_ERROR(checkpoint.add_file(path));
    return checkpoint;
  }
  // Sharded: {"metadata": {...}, "weight_map": {"tensor name": "shard file name", ...}}.
  PAGELLM_ASSIGN_OR_RETURN(json index, read_json_file(path, "safetensors"));
  const auto weight_map = index.is_object() ? index.find("weight_map") : index.end();
  if (!index.is_object() || weight_map == index.end() || !weight_map->is_object()) {
    return invalid_argument("[safetensors] {}: has no 'weight_map' object", path);
  }
  const fs::path dir = fs::path(path).parent_path();
  std::set<std::string> shard_names;
  for (const auto& [name, shard] : weight_map->items()) {
    if (!shard.is_string()) {
      return invalid_argument("[safetensors] {}: weight_map['{}'] must be a file name, got {}",
                              path, name, short_dump(shard));
    }
    shard_names.insert(shard.get<std::string>());
  }
  for (const std::string& shard : shard_names) {
    PAGELLM_RETURN_IF_ERROR(checkpoint.add_file((dir / shard).string()));
  }
  for (const auto& [name, shard] : weight_map->items()) {
    if (checkpoint.find(name) == nullptr && !checkpoint.unsupported_.contains(name)) {
      return invalid_argument(
          "[safetensors] {}: tensor '{}' is mapped to {}, which does not hold it", path, name,
          shard.get<std::string>());
    }
  }
  return checkpoint;
}

Expected<Checkpoint> Checkpoint::open_dir(const std::string& model_dir) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) {
    return not_found("[safetensors] {} is not a folder", model_dir);
  }
  const fs::path dir(model_dir);
  if (fs::exists(dir / kIndexFileName, ec)) return open_file((dir / kIndexFileName).string());
  if (fs::exists(dir / "model.safetensors", ec))
    return open_file((dir / "model.safetensors").string());
  // No standard name: take every *.safetensors (sorted, so errors are reproducible).
  std::vector<std::string> paths;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec) && entry.path().extension() == ".safetensors") {
      paths.push_back(entry.path().string());
    }
  }
  if (paths.empty()) {
    return not_found("[safetensors] {} holds no {}, model.safetensors or *.safetensors", model_dir,
                     kIndexFileName);
  }
  std::sort(paths.begin(), paths.end());
  Checkpoint checkpoint;
  checkpoint.source_ = model_dir;
  for (const std::string& path : paths) PAGELLM_RETURN_IF_ERROR(checkpoint.add_file(path));
  return checkpoint;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) names.push_back(name);
  return names;
}

Expected<const TensorInfo*> Checkpoint::get(std::string_view name,
                                            const std::vector<int64_t>& expected_shape) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) {
    const auto unsupported = unsupported_.find(name);
    if (unsupported != unsupported_.end()) {
      return unimplemented(
          "[checkpoint] tensor '{}' is stored as {}; pagellm reads F32, BF16, F16, F8_E4M3, I32, I64 and U8",
          name, unsupported->second);
    }
    return not_found("[checkpoint] tensor '{}' is missing from {} ({} tensors)", name, source_,
                     tensors_.size() + unsupported_.size());
  }
  if (info->shape != expected_shape) {
    return invalid_argument("[checkpoint] tensor '{}' has shape {}, expected {} (in {})", name,
                            shape_string(info->shape), shape_string(expected_shape), info->file);
  }
  return info;
}

Expected<const TensorInfo*> Checkpoint::get(std::string_view name,
                                            const std::vector<int64_t>& expected_shape,
                                            DType expected_dtype) const {
  PAGELLM_ASSIGN_OR_RETURN(const TensorInfo* info, get(name, expected_shape));
  if (info->dtype != expected_dtype) {
    return invalid_argument("[checkpoint] tensor '{}' has dtype {}, expected {} (in {})", name,
                            safetensors_dtype_name(info->dtype),
                            safetensors_dtype_name(expected_dtype), info->file);
  }
  return info;
}

}  // namespace pagellm
