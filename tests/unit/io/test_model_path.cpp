#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "io/model_path.h"
#include "io_test_util.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;
using pagellm::testing::has_substr;
using pagellm::testing::TempDir;
using pagellm::testing::write_text_file;

constexpr const char* kHashA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
constexpr const char* kHashB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
constexpr const char* kHashC = "cccccccccccccccccccccccccccccccccccccccc";

// Sets an environment variable for one test and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// <hub>/models--Qwen--Qwen3-0.6B with snapshots A (older) and B (newer), refs/main -> A.
// `hub_subdir` puts the hub below the temp folder, as $HF_HOME/hub is.
struct FakeHubCache {
  explicit FakeHubCache(const char* hub_subdir = "")
      : hub_dir(dir.path() / hub_subdir), repo_dir(hub_dir / "models--Qwen--Qwen3-0.6B") {}

  TempDir dir;
  fs::path hub_dir;
  fs::path repo_dir;

  void add_snapshot(const char* hash, std::chrono::seconds age, bool with_config = true) {
    const fs::path snapshot = repo_dir / "snapshots" / hash;
    fs::create_directories(snapshot);
    if (with_config) write_text_file((snapshot / "config.json").string(), "{}");
    fs::last_write_time(snapshot, fs::file_time_type::clock::now() - age);
  }
  void add_ref(const std::string& name, const std::string& hash) {
    write_text_file((repo_dir / "refs" / name).string(), hash);  // no newline, like the hub writes
  }
  std::string snapshot(const char* hash) const { return (repo_dir / "snapshots" / hash).string(); }
  std::string hub() const { return hub_dir.string(); }
};

TEST(ModelPath, FolderIsItself) {
  TempDir dir;
  write_text_file(dir.file("config.json"), "{}");
  auto path = resolve_model_path(dir.path().string(), "");
  ASSERT_TRUE(path.has_value()) << path.status().message();
  EXPECT_EQ(*path, dir.path().string());
}

TEST(ModelPath, FolderWithoutConfigIsAnError) {
  TempDir dir;
  auto path = resolve_model_path(dir.path().string(), "");
  ASSERT_FALSE(path.has_value());
  EXPECT_EQ(
      path.status().message(),
      "[model] folder '" + dir.path().string() +
          "' has no config.json; a model folder holds config.json and the *.safetensors weights");
  write_text_file(dir.file("model.safetensors"), "x");
  auto file = resolve_model_path(dir.file("model.safetensors"), "");
  ASSERT_FALSE(file.has_value());
  EXPECT_PRED2(has_substr, file.status().message(), "is a file; --model takes a model folder");
}

TEST(ModelPath, RefsMainPicksItsSnapshot) {
  FakeHubCache cache;
  cache.add_snapshot(kHashA, std::chrono::seconds(1000));
  cache.add_snapshot(kHashB, std::chrono::seconds(10));  // newer, but refs/main wins
  cache.add_ref("main", std::string(kHashA) + "\n");
  auto path = resolve_in_hf_cache("Qwen/Qwen3-0.6B", "", cache.hub());
  ASSERT_TRUE(path.has_value()) << path.status().message();
  EXPECT_EQ(*path, cache.snapshot(kHashA));
}

TEST(ModelPath, RevisionByRefNameOrCommitHash) {
  FakeHubCache cache;
  cache.add_snapshot(kHashA, std::chrono::seconds(1000));
  cache.add_snapshot(kHashB, std::chrono::seconds(10));
  cache.add_ref("main", kHashA);
  cache.add_ref("v2", kHashB);
  auto by_ref = resolve_in_hf_cache("Qwen/Qwen3-0.6B", "v2", cache.hub());
  ASSERT_TRUE(by_ref.has_value()) << by_ref.status().message();
  EXPECT_EQ(*by_ref, cache.snapshot(kHashB));
  auto by_hash = resolve_in_hf_cache("Qwen/Qwen3-0.6B", kHashB, cache.hub());
  ASSERT_TRUE(by_hash.has_value()) << by_hash.status().message();
  EXPECT_EQ(*by_hash, cache.snapshot(kHashB));

  auto unknown = resolve_in_hf_cache("Qwen/Qwen3-0.6B", "v3", cache.hub());
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(
      unknown.status().message(),
      fmt::format("[model] revision 'v3' of 'Qwen/Qwen3-0.6B' is not in the Hugging Face cache "
                  "({}; refs: [main, v2], snapshots: [{}, {}]); fetch it with "
                  "`huggingface-cli download Qwen/Qwen3-0.6B --revision v3` first",
                  cache.repo_dir.string(), kHashA, kHashB));

  auto missing_hash = resolve_in_hf_cache("Qwen/Qwen3-0.6B", kHashC, cache.hub());
  ASSERT_FALSE(missing_hash.has_value());
  EXPECT_PRED2(has_substr, missing_hash.status().message(),
               std::string("is commit ") + kHashC + ", whose snapshot is not in the cache");

  auto escape = resolve_in_hf_cache("Qwen/Qwen3-0.6B", "../../etc", cache.hub());
  ASSERT_FALSE(escape.has_value());
  EXPECT_PRED2(has_substr, escape.status().message(), "is not a branch, tag or commit hash");
}

TEST(ModelPath, NoRefsTakesNewestSnapshot) {
  FakeHubCache cache;
  cache.add_snapshot(kHashB, std::chrono::seconds(10));
  cache.add_snapshot(kHashA, std::chrono::seconds(5000));
  cache.add_snapshot(kHashC, std::chrono::seconds(100));
  auto path = resolve_in_hf_cache("Qwen/Qwen3-0.6B", "", cache.hub());
  ASSERT_TRUE(path.has_value()) << path.status().message();
  EXPECT_EQ(*path, cache.snapshot(kHashB));
}

TEST(ModelPath, IncompleteCacheEntries) {
  FakeHubCache cache;
  fs::create_directories(cache.repo_dir / "snapshots");
  auto no_snapshot = resolve_in_hf_cache("Qwen/Qwen3-0.6B", "", cache.hub());
  ASSERT_FALSE(no_snapshot.has_value());
  EXPECT_PRED2(has_substr, no_snapshot.status().message(), "is in the Hugging Face cache");
  EXPECT_PRED2(has_substr, no_snapshot.status().message(), "but has no snapshot");

  cache.add_snapshot(kHashA, std::chrono::seconds(10), /*with_config=*/false);
  cache.add_ref("main", kHashA);
  auto no_config = resolve_in_hf_cache("Qwen/Qwen3-0.6B", "", cache.hub());
  ASSERT_FALSE(no_config.has_value());
  EXPECT_PRED2(has_substr, no_config.status().message(),
               "has no config.json (an incomplete download?)");
}

TEST(ModelPath, NotFoundSaysWhereItLookedAndHowToFetch) {
  TempDir hub;
  const ScopedEnv hub_cache("HF_HUB_CACHE", hub.path().string());
  auto path = resolve_model_path("Qwen/Qwen3-0.6B", "");
  ASSERT_FALSE(path.has_value());
  EXPECT_EQ(path.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(
      path.status().message(),
      "[model] 'Qwen/Qwen3-0.6B' is not a folder and not in the Hugging Face cache (looked in " +
          hub.path().string() +
          "); pagellm does not download models: fetch it with `huggingface-cli download "
          "Qwen/Qwen3-0.6B` first");

  auto not_repo = resolve_model_path("no_such_folder", "");
  ASSERT_FALSE(not_repo.has_value());
  EXPECT_EQ(
      not_repo.status().message(),
      "[model] 'no_such_folder' is not a folder (nor a Hugging Face repo id of the form org/name)");
}

TEST(ModelPath, ResolvesThroughTheEnvironment) {
  FakeHubCache cache;
  cache.add_snapshot(kHashA, std::chrono::seconds(10));
  cache.add_ref("main", kHashA);
  {
    const ScopedEnv hub_cache("HF_HUB_CACHE", cache.hub());
    auto path = resolve_model_path("Qwen/Qwen3-0.6B", "");
    ASSERT_TRUE(path.has_value()) << path.status().message();
    EXPECT_EQ(*path, cache.snapshot(kHashA));
  }
  // HF_HOME/hub when HF_HUB_CACHE is unset.
  FakeHubCache home_cache("hub");
  home_cache.add_snapshot(kHashB, std::chrono::seconds(10));
  home_cache.add_ref("main", kHashB);
  const ScopedEnv no_hub_cache("HF_HUB_CACHE", std::nullopt);
  const ScopedEnv no_legacy("HUGGINGFACE_HUB_CACHE", std::nullopt);
  const ScopedEnv hf_home("HF_HOME", home_cache.dir.path().string());
  EXPECT_EQ(hf_hub_cache_dir(), home_cache.hub());
  auto path = resolve_model_path("Qwen/Qwen3-0.6B", "");
  ASSERT_TRUE(path.has_value()) << path.status().message();
  EXPECT_EQ(*path, home_cache.snapshot(kHashB));
}

TEST(ModelPath, HubCacheDirPrecedence) {
  const ScopedEnv hub_cache("HF_HUB_CACHE", "/x/hub");
  const ScopedEnv legacy("HUGGINGFACE_HUB_CACHE", "/legacy");
  const ScopedEnv hf_home("HF_HOME", "/y");
  const ScopedEnv xdg("XDG_CACHE_HOME", "/z");
  const ScopedEnv home("HOME", "/home/me");
  EXPECT_EQ(hf_hub_cache_dir(), "/x/hub");
  {
    const ScopedEnv unset("HF_HUB_CACHE", std::nullopt);
    EXPECT_EQ(hf_hub_cache_dir(), "/legacy");
    const ScopedEnv unset_legacy("HUGGINGFACE_HUB_CACHE", std::nullopt);
    EXPECT_EQ(hf_hub_cache_dir(), "/y/hub");
    const ScopedEnv unset_home("HF_HOME", std::nullopt);
    EXPECT_EQ(hf_hub_cache_dir(), "/z/huggingface/hub");
    const ScopedEnv unset_xdg("XDG_CACHE_HOME", std::nullopt);
    EXPECT_EQ(hf_hub_cache_dir(), "/home/me/.cache/huggingface/hub");
  }
  const ScopedEnv tilde("HF_HUB_CACHE", "~/hf");
  EXPECT_EQ(hf_hub_cache_dir(), "/home/me/hf");
}

TEST(ModelPath, RepoIdShape) {
  EXPECT_TRUE(looks_like_hf_repo_id("Qwen/Qwen3-0.6B"));
  EXPECT_TRUE(looks_like_hf_repo_id("meta-llama/Llama-3.2-1B_instruct"));
  EXPECT_FALSE(looks_like_hf_repo_id("Qwen3-0.6B"));
  EXPECT_FALSE(looks_like_hf_repo_id("a/b/c"));
  EXPECT_FALSE(looks_like_hf_repo_id("/abs/path"));
  EXPECT_FALSE(looks_like_hf_repo_id("../x"));
  EXPECT_FALSE(looks_like_hf_repo_id("org/na me"));
  EXPECT_FALSE(looks_like_hf_repo_id("org/a--b"));
}

}  // namespace
}  // namespace pagellm
