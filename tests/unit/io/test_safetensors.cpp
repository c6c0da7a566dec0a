#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "io_test_util.h"

namespace pagellm {
namespace {

using pagellm::testing::has_substr;
using pagellm::testing::starts_with;
using pagellm::testing::TempDir;
using pagellm::testing::write_text_file;

std::vector<uint8_t> counting_bytes(size_t count, uint8_t start = 1) {
  std::vector<uint8_t> bytes(count);
  std::iota(bytes.begin(), bytes.end(), start);
  return bytes;
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// A .safetensors file with a hand-written header; `header_length` overrides the length field.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes,
               std::optional<uint64_t> header_length = std::nullopt) {
  std::string bytes(8, '\0');
  const uint64_t length = header_length.value_or(header.size());
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(length >> (8 * i));
  bytes += header;
  bytes.append(data_bytes, '\x5a');
  write_text_file(path, bytes);
}

std::string open_error(const std::string& path) {
  auto checkpoint = Checkpoint::open_file(path);
  EXPECT_FALSE(checkpoint.has_value()) << "opened " << path;
  return checkpoint.status().message();
}

TEST(Safetensors, WriterReaderRoundTripAllDTypes) {
  TempDir dir;
  SafetensorsWriter writer;
  struct Case {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  const std::vector<Case> cases = {
      {"model.embed_tokens.weight", DType::kF32, {4, 3}},
      {"model.norm.weight", DType::kBF16, {5}},
      {"half", DType::kF16, {2, 1, 3}},
      {"ids32", DType::kI32, {3}},
      {"ids64", DType::kI64, {2, 2}},
      {"mask", DType::kU8, {7}},
      {"scalar", DType::kF32, {}},
      {"empty", DType::kBF16, {0, 4}},
  };
  for (const Case& c : cases) {
    int64_t numel = 1;
    for (int64_t extent : c.shape) numel *= extent;
    writer.add(c.name, c.dtype, c.shape,
               counting_bytes(static_cast<size_t>(numel) * dtype_size_bytes(c.dtype)));
  }
  ASSERT_TRUE(writer.write(dir.file("model.safetensors")).is_ok());
  EXPECT_FALSE(std::filesystem::exists(dir.file("model.safetensors.tmp")));

  auto checkpoint = Checkpoint::open_dir(dir.path().string());
  ASSERT_TRUE(checkpoint.has_value()) << checkpoint.status().message();
  EXPECT_EQ(checkpoint->size(), cases.size());
  const std::vector<std::string> names = checkpoint->names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const Case& c : cases) {
    const TensorInfo* info = checkpoint->find(c.name);
    ASSERT_NE(info, nullptr) << c.name;
    EXPECT_EQ(info->name, c.name);
    EXPECT_EQ(info->dtype, c.dtype) << c.name;
    EXPECT_EQ(info->shape, c.shape) << c.name;
    EXPECT_EQ(info->file, dir.file("model.safetensors"));
    const std::vector<uint8_t> expected = counting_bytes(info->nbytes);
    ASSERT_EQ(info->nbytes, expected.size());
    if (info->nbytes > 0) {
      EXPECT_EQ(std::memcmp(info->data, expected.data(), info->nbytes), 0) << c.name;
    }
    // The python layout keeps every tensor aligned to its element size.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(info->data) % dtype_size_bytes(c.dtype), 0u) << c.name;
    auto fetched = checkpoint->get(c.name, c.shape, c.dtype);
    ASSERT_TRUE(fetched.has_value()) << fetched.status().message();
    EXPECT_EQ(*fetched, info);
  }
  EXPECT_EQ(checkpoint->find("absent"), nullptr);
}

// The python library sorts by dtype (largest alignment first) then name, writes compact JSON with
// __metadata__ first and tensors in data order, and pads the header with spaces to 8 bytes.
TEST(Safetensors, WriterMatchesPythonLayout) {
  SafetensorsWriter writer;
  writer.add("b", DType::kF32, {2}, counting_bytes(8, 0x10));
  writer.add("a", DType::kBF16, {3}, counting_bytes(6, 0x20));
  writer.add("c", DType::kI64, {1}, counting_bytes(8, 0x30));
  writer.add("d", DType::kU8, {}, counting_bytes(1, 0x40));
  writer.add("a2", DType::kF32, {1, 1}, counting_bytes(4, 0x50));
  const std::vector<uint8_t> bytes = writer.serialize();
  const std::string expected_json = R"({"__metadata__":{"format":"pt"},)"
                                    R"("c":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
                                    R"("a2":{"dtype":"F32","shape":[1,1],"data_offsets":[8,12]},)"
                                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]},)"
                                    R"("a":{"dtype":"BF16","shape":[3],"data_offsets":[20,26]},)"
                                    R"("d":{"dtype":"U8","shape":[],"data_offsets":[26,27]}})";
  const size_t padded = (expected_json.size() + 7) / 8 * 8;
  ASSERT_EQ(bytes.size(), 8 + padded + 27);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | bytes[i];
  EXPECT_EQ(header_length, padded);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(padded));
  EXPECT_EQ(header, expected_json + std::string(padded - expected_json.size(), ' '));
  EXPECT_EQ(bytes[8 + padded], 0x30);      // c first
  EXPECT_EQ(bytes[8 + padded + 8], 0x50);  // then a2
  EXPECT_EQ(bytes.back(), 0x40);           // d last
  // Deterministic: adding in another order gives the same bytes.
  SafetensorsWriter reordered;
  reordered.add("d", DType::kU8, {}, counting_bytes(1, 0x40));
  reordered.add("a2", DType::kF32, {1, 1}, counting_bytes(4, 0x50));
  reordered.add("c", DType::kI64, {1}, counting_bytes(8, 0x30));
  reordered.add("a", DType::kBF16, {3}, counting_bytes(6, 0x20));
  reordered.add("b", DType::kF32, {2}, counting_bytes(8, 0x10));
  EXPECT_EQ(reordered.serialize(), bytes);
}

// tests/data/io/python_layout.safetensors was written by safetensors 0.8.0 (torch 2.11) with
// make_python_layout.py beside it, on the GPU machine.
TEST(Safetensors, PythonWrittenFileReadsAndRewritesByteForByte) {
  const std::string path =
      std::string(PAGELLM_SOURCE_DIR) + "/tests/data/io/python_layout.safetensors";
  auto checkpoint = Checkpoint::open_file(path);
  ASSERT_TRUE(checkpoint.has_value()) << checkpoint.status().message();
  EXPECT_EQ(checkpoint->names(),
            (std::vector<std::string>{"a.bias", "a.weight", "b.weight", "h", "i", "layers.10.w",
                                      "layers.2.w", "m", "scalar", "z"}));
  const auto values_of = [&](const char* name, auto zero) {
    const TensorInfo* info = checkpoint->find(name);
    std::vector<decltype(zero)> values(info->nbytes / sizeof(zero));
    std::memcpy(values.data(), info->data, info->nbytes);
    return values;
  };
  EXPECT_EQ(values_of("b.weight", 0.0f), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(checkpoint->find("b.weight")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values_of("a.weight", uint16_t{0}),
            (std::vector<uint16_t>{0x0000, 0x3f80, 0x4000, 0x4040, 0x4080}));  // bf16 0..4
  EXPECT_EQ(values_of("h", uint16_t{0}), (std::vector<uint16_t>{0x3c00, 0xc000, 0x3554}));
  EXPECT_EQ(values_of("i", int32_t{0}), (std::vector<int32_t>{7, -8, 9}));
  EXPECT_EQ(values_of("z", int64_t{0}), (std::vector<int64_t>{1, int64_t{1} << 40}));
  EXPECT_EQ(values_of("m", uint8_t{0}), (std::vector<uint8_t>{1, 2, 255}));
  EXPECT_EQ(checkpoint->find("scalar")->shape, std::vector<int64_t>{});
  EXPECT_EQ(checkpoint->find("scalar")->dtype, DType::kBF16);

  SafetensorsWriter writer;
  for (const std::string& name : checkpoint->names()) {
    const TensorInfo* info = checkpoint->find(name);
    const auto* data = static_cast<const uint8_t*>(info->data);
    writer.add(name, info->dtype, info->shape, std::vector<uint8_t>(data, data + info->nbytes));
  }
  EXPECT_EQ(writer.serialize(), read_all(path));
}

TEST(Safetensors, WriteFileEqualsSerialize) {
  TempDir dir;
  SafetensorsWriter writer;
  writer.add("x", DType::kF16, {3, 2}, counting_bytes(12));
  ASSERT_TRUE(writer.write(dir.file("x.safetensors")).is_ok());
  EXPECT_EQ(read_all(dir.file("x.safetensors")), writer.serialize());
  const Status bad = writer.write(dir.file("no/such/folder/x.safetensors"));
  EXPECT_FALSE(bad.is_ok());
  EXPECT_PRED2(starts_with, bad.message(), "[safetensors] cannot write");
}

void write_shard(const std::string& path, const std::vector<std::string>& names) {
  SafetensorsWriter writer;
  for (const std::string& name : names) writer.add(name, DType::kF32, {2, 2}, counting_bytes(16));
  ASSERT_TRUE(writer.write(path).is_ok());
}

TEST(Safetensors, ShardedIndexOpensAllShards) {
  TempDir dir;
  write_shard(dir.file("model-00001-of-00002.safetensors"),
              {"model.embed_tokens.weight", "model.layers.0.w"});
  write_shard(dir.file("model-00002-of-00002.safetensors"),
              {"model.norm.weight", "lm_head.weight"});
  write_text_file(dir.file("model.safetensors.index.json"), R"({
    "metadata": {"total_size": 64},
    "weight_map": {
      "lm_head.weight": "model-00002-of-00002.safetensors",
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.layers.0.w": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00002-of-00002.safetensors"
    }})");
  // A stray single file beside the index must not be picked up.
  write_shard(dir.file("model.safetensors"), {"stray"});
  auto checkpoint = Checkpoint::open_dir(dir.path().string());
  ASSERT_TRUE(checkpoint.has_value()) << checkpoint.status().message();
  EXPECT_EQ(checkpoint->names(),
            (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight",
                                      "model.layers.0.w", "model.norm.weight"}));
  EXPECT_EQ(checkpoint->find("lm_head.weight")->file, dir.file("model-00002-of-00002.safetensors"));
  EXPECT_EQ(checkpoint->find("model.layers.0.w")->file,
            dir.file("model-00001-of-00002.safetensors"));
  EXPECT_EQ(checkpoint->find("stray"), nullptr);
}

TEST(Safetensors, ShardedIndexErrors) {
  TempDir dir;
  write_shard(dir.file("a.safetensors"), {"x"});
  write_text_file(dir.file("model.safetensors.index.json"),
                  R"({"weight_map": {"x": "a.safetensors", "y": "a.safetensors"}})");
  EXPECT_EQ(open_error(dir.file("model.safetensors.index.json")),
            "[safetensors] " + dir.file("model.safetensors.index.json") +
                ": tensor 'y' is mapped to a.safetensors, which does not hold it");

  write_text_file(dir.file("model.safetensors.index.json"),
                  R"({"weight_map": {"x": "a.safetensors", "y": "missing.safetensors"}})");
  EXPECT_PRED2(starts_with, open_error(dir.file("model.safetensors.index.json")),
               "[safetensors] cannot open " + dir.file("missing.safetensors"));

  write_text_file(dir.file("model.safetensors.index.json"), R"({"metadata": {}})");
  EXPECT_PRED2(has_substr, open_error(dir.file("model.safetensors.index.json")), "no 'weight_map'");

  write_text_file(dir.file("model.safetensors.index.json"), "{ not json");
  EXPECT_PRED2(has_substr, open_error(dir.file("model.safetensors.index.json")), "not valid JSON");
}

TEST(Safetensors, OpenDirFallsBackToAnySafetensorsFiles) {
  TempDir dir;
  write_shard(dir.file("weights-b.safetensors"), {"b"});
  write_shard(dir.file("weights-a.safetensors"), {"a"});
  auto checkpoint = Checkpoint::open_dir(dir.path().string());
  ASSERT_TRUE(checkpoint.has_value()) << checkpoint.status().message();
  EXPECT_EQ(checkpoint->names(), (std::vector<std::string>{"a", "b"}));

  write_shard(dir.file("weights-c.safetensors"), {"a"});  // the same name twice
  auto duplicate = Checkpoint::open_dir(dir.path().string());
  ASSERT_FALSE(duplicate.has_value());
  EXPECT_PRED2(has_substr, duplicate.status().message(), "tensor 'a' is in both");

  TempDir empty;
  auto none = Checkpoint::open_dir(empty.path().string());
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_PRED2(has_substr, none.status().message(), "holds no model.safetensors.index.json");

  auto not_dir = Checkpoint::open_dir(empty.file("nope"));
  ASSERT_FALSE(not_dir.has_value());
  EXPECT_PRED2(has_substr, not_dir.status().message(), "is not a folder");
}

TEST(Safetensors, MissingFile) {
  TempDir dir;
  auto checkpoint = Checkpoint::open_file(dir.file("model.safetensors"));
  ASSERT_FALSE(checkpoint.has_value());
  EXPECT_EQ(checkpoint.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(
      checkpoint.status().message(),
      "[safetensors] cannot open " + dir.file("model.safetensors") + ": No such file or directory");
}

TEST(Safetensors, TruncatedFileIsAClearError) {
  TempDir dir;
  SafetensorsWriter writer;
  writer.add("x", DType::kF32, {4}, counting_bytes(16));
  writer.add("y", DType::kF32, {4}, counting_bytes(16));
  std::vector<uint8_t> bytes = writer.serialize();
  const size_t full_size = bytes.size();
  bytes.resize(full_size - 5);
  const std::string path = dir.file("model.safetensors");
  write_text_file(path, std::string(bytes.begin(), bytes.end()));
  EXPECT_EQ(open_error(path),
            fmt::format("[safetensors] {}: tensor 'y' ends at byte {} past the end of the file ({} "
                        "bytes); the file is truncated or corrupt",
                        path, full_size, full_size - 5));

  // Cut inside the header: the header length now runs past the end.
  bytes.resize(20);
  write_text_file(path, std::string(bytes.begin(), bytes.end()));
  EXPECT_PRED2(has_substr, open_error(path), "is larger than the rest of the file (12 bytes)");

  bytes.resize(5);
  write_text_file(path, std::string(bytes.begin(), bytes.end()));
  EXPECT_EQ(open_error(path), "[safetensors] " + path +
                                  ": file is 5 bytes, too short to hold the 8-byte header length "
                                  "(truncated or not a safetensors file)");
  write_text_file(path, "");
  EXPECT_PRED2(has_substr, open_error(path), "file is 0 bytes");
}

TEST(Safetensors, HeaderLengthLargerThanFile) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_raw(path, R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4, 1ull << 40);
  EXPECT_EQ(open_error(path),
            "[safetensors] " + path +
                ": header length 1099511627776 is larger than the rest of the "
                "file (58 bytes); the file is truncated or not a safetensors file");
  write_raw(path, "{}", 0, ~0ull);  // would overflow 8 + length
  EXPECT_PRED2(has_substr, open_error(path), "header length 18446744073709551615 is larger");
}

TEST(Safetensors, HeaderGarbage) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_raw(path, "this is not json at all", 16);
  EXPECT_PRED2(starts_with, open_error(path),
               "[safetensors] " + path + ": header is not valid JSON (");
  write_raw(path, "[1, 2, 3]", 0);
  EXPECT_EQ(open_error(path),
            "[safetensors] " + path + ": header must be a JSON object, got [1,2,3]");
  write_raw(path, R"({"x": 5})", 0);
  EXPECT_PRED2(has_substr, open_error(path), "tensor 'x' entry must be an object, got 5");
  write_raw(path, R"({"x":{"shape":[1],"data_offsets":[0,4]}})", 4);
  EXPECT_PRED2(has_substr, open_error(path), "tensor 'x' has no string 'dtype'");
  write_raw(path, R"({"x":{"dtype":"F32","data_offsets":[0,4]}})", 4);
  EXPECT_PRED2(has_substr, open_error(path), "tensor 'x' has no 'shape' list");
  write_raw(path, R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4);
  EXPECT_PRED2(has_substr, open_error(path), "tensor 'x' has a bad shape [-1]");
  write_raw(path, R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4);
  EXPECT_PRED2(has_substr, open_error(path),
               "tensor 'x' needs 'data_offsets' [begin, end], got [0]");
  write_raw(path, R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8);
  EXPECT_PRED2(has_substr, open_error(path), "data_offsets [8, 4] that end before they begin");
  write_raw(path, R"({"x":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,4]}})", 4);
  EXPECT_EQ(open_error(path), "[safetensors] " + path + ": tensor 'x' has unknown dtype 'Q4_K'");
}

TEST(Safetensors, OffsetsPastEnd) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const std::string header = R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[16,32]}})";
  write_raw(path, header, 20);
  EXPECT_EQ(open_error(path),
            fmt::format("[safetensors] {}: tensor 'x' ends at byte {} past the end of the file ({} "
                        "bytes); the file is truncated or corrupt",
                        path, 8 + header.size() + 32, 8 + header.size() + 20));
}

TEST(Safetensors, ShapeAndOffsetsDisagree) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_raw(path, R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,16]}})", 16);
  EXPECT_EQ(open_error(path), "[safetensors] " + path +
                                  ": tensor 'w' has shape [2, 3] and dtype BF16 (12 bytes) but its "
                                  "data_offsets span 16 bytes");
  // A shape whose byte count overflows 64 bits must not wrap around into a match.
  write_raw(path, R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})",
            0);
  EXPECT_PRED2(has_substr, open_error(path),
               "(overflowing bytes) but its data_offsets span 0 bytes");
}

TEST(Safetensors, MetadataIgnoredAndUnsupportedDTypeReportedOnRequest) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_raw(path,
            R"({"__metadata__":{"format":"pt","anything":"goes"},)"
            R"("f":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("d":{"dtype":"F64","shape":[1],"data_offsets":[8,16]}})",
            16);
  auto checkpoint = Checkpoint::open_file(path);
  ASSERT_TRUE(checkpoint.has_value()) << checkpoint.status().message();
  EXPECT_EQ(checkpoint->names(), std::vector<std::string>{"f"});
  EXPECT_EQ(checkpoint->find("d"), nullptr);
  auto fetched = checkpoint->get("d", {1});
  ASSERT_FALSE(fetched.has_value());
  EXPECT_EQ(fetched.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(fetched.status().message(), "[checkpoint] tensor 'd' is stored as F64 in " + path +
                                            "; pagellm reads F32, BF16, F16, F8_E4M3, I32, I64 and U8");
  // The span of a known-but-unsupported dtype is still checked.
  write_raw(path, R"({"d":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", 8);
  EXPECT_PRED2(has_substr, open_error(path),
               "dtype F64 (16 bytes) but its data_offsets span 8 bytes");
}

TEST(Safetensors, GetValidatesShapeDTypeAndPresence) {
  TempDir dir;
  SafetensorsWriter writer;
  writer.add("model.layers.0.self_attn.q_proj.weight", DType::kBF16, {8, 4}, counting_bytes(64));
  ASSERT_TRUE(writer.write(dir.file("model.safetensors")).is_ok());
  auto checkpoint = Checkpoint::open_dir(dir.path().string());
  ASSERT_TRUE(checkpoint.has_value()) << checkpoint.status().message();

  auto wrong_shape = checkpoint->get("model.layers.0.self_attn.q_proj.weight", {4, 8});
  ASSERT_FALSE(wrong_shape.has_value());
  EXPECT_EQ(wrong_shape.status().message(),
            "[checkpoint] tensor 'model.layers.0.self_attn.q_proj.weight' has shape [8, 4], "
            "expected [4, 8] (in " +
                dir.file("model.safetensors") + ")");

  auto wrong_dtype = checkpoint->get("model.layers.0.self_attn.q_proj.weight", {8, 4}, DType::kF32);
  ASSERT_FALSE(wrong_dtype.has_value());
  EXPECT_EQ(wrong_dtype.status().message(),
            "[checkpoint] tensor 'model.layers.0.self_attn.q_proj.weight' has dtype BF16, expected "
            "F32 (in " +
                dir.file("model.safetensors") + ")");

  auto missing = checkpoint->get("lm_head.weight", {16, 4});
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "[checkpoint] tensor 'lm_head.weight' is missing from " +
                                            dir.file("model.safetensors") + " (1 tensors)");

  EXPECT_TRUE(checkpoint->get("model.layers.0.self_attn.q_proj.weight", {8, 4}).has_value());
}

TEST(Safetensors, CheckpointCopiesShareTheMapping) {
  TempDir dir;
  SafetensorsWriter writer;
  writer.add("x", DType::kF32, {2}, counting_bytes(8));
  ASSERT_TRUE(writer.write(dir.file("model.safetensors")).is_ok());
  const TensorInfo* info = nullptr;
  Checkpoint copy = [&] {
    auto original = Checkpoint::open_dir(dir.path().string());
    EXPECT_TRUE(original.has_value());
    return std::move(original).value();
  }();
  info = copy.find("x");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(std::memcmp(info->data, counting_bytes(8).data(), 8), 0);
}

}  // namespace
}  // namespace pagellm
