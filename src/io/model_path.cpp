#include "io/model_path.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pagellm {
namespace {

namespace fs = std::filesystem;

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// huggingface_hub expands "~" in its environment variables.
std::string expand_home(const std::string& path) {
  if (path.empty() || path[0] != '~') return path;
  const std::string home = env_or_empty("HOME");
  return home.empty() ? path : home + path.substr(1);
}

bool is_commit_hash(std::string_view text) {
  return text.size() == 40 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string download_hint(const std::string& repo_id, const std::string& revision) {
  return revision.empty()
             ? fmt::format("fetch it with `huggingface-cli download {}` first", repo_id)
             : fmt::format("fetch it with `huggingface-cli download {} --revision {}` first",
                           repo_id, revision);
}

std::vector<std::string> list_names(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The snapshot folder written last; ties broken by name so the choice is reproducible.
std::string newest_snapshot(const fs::path& snapshots_dir) {
  std::string newest_name;
  fs::file_time_type newest_time{};
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(snapshots_dir, ec)) {
    if (!entry.is_directory(ec)) continue;
    const fs::file_time_type time = entry.last_write_time(ec);
    const std::string name = entry.path().filename().string();
    if (newest_name.empty() || time > newest_time || (time == newest_time && name > newest_name)) {
      newest_name = name;
      newest_time = time;
    }
  }
  return newest_name;
}

}  // namespace

bool looks_like_hf_repo_id(const std::string& text) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos || text.find('/', slash + 1) != std::string::npos) return false;
  const auto valid_part = [](std::string_view part) {
    if (part.empty() || part.size() > 96 || part.front() == '.' || part.front() == '-')
      return false;
    if (part.find("..") != std::string_view::npos || part.find("--") != std::string_view::npos) {
      return false;
    }
    return std::all_of(part.begin(), part.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '-' || c == '_' || c == '.';
    });
  };
  const std::string_view view(text);
  return valid_part(view.substr(0, slash)) && valid_part(view.substr(slash + 1));
}

std::string hf_hub_cache_dir() {
  for (const char* name : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}) {
    const std::string value = env_or_empty(name);
    if (!value.empty()) return expand_home(value);
  }
  const std::string hf_home = env_or_empty("HF_HOME");
  if (!hf_home.empty()) return (fs::path(expand_home(hf_home)) / "hub").string();
  const std::string xdg_cache = env_or_empty("XDG_CACHE_HOME");
  if (!xdg_cache.empty())
    return (fs::path(expand_home(xdg_cache)) / "huggingface" / "hub").string();
  const std::string home = env_or_empty("HOME");
  return (fs::path(home.empty() ? "~" : home) / ".cache" / "huggingface" / "hub").string();
}

Expected<std::string> resolve_in_hf_cache(const std::string& repo_id, const std::string& revision,
                                          const std::string& hub_cache_dir) {
  std::string folder_name = "models--" + repo_id;
  for (size_t pos = 0; (pos = folder_name.find('/', pos)) != std::string::npos; pos += 2) {
    folder_name.replace(pos, 1, "--");
  }
  const fs::path repo_dir = fs::path(hub_cache_dir) / folder_name;
  std::error_code ec;
  if (!fs::is_directory(repo_dir, ec)) {
    return not_found(
        "[model] '{}' is not a folder and not in the Hugging Face cache (looked in {}); pagellm "
        "does not download models: {}",
        repo_id, hub_cache_dir, download_hint(repo_id, revision));
  }
  if (revision.find("..") != std::string::npos || (!revision.empty() && revision[0] == '/')) {
    return invalid_argument("[model] revision '{}' is not a branch, tag or commit hash", revision);
  }
  const std::string ref_name = revision.empty() ? "main" : revision;
  const fs::path ref_file = repo_dir / "refs" / ref_name;
  const fs::path snapshots_dir = repo_dir / "snapshots";
  std::string commit;
  if (fs::is_regular_file(ref_file, ec)) {
    std::ifstream in(ref_file);
    in >> commit;  // the file holds the hash, maybe with a newline
    if (commit.empty()) {
      return invalid_argument("[model] {} is empty; the Hugging Face cache of '{}' is damaged",
                              ref_file.string(), repo_id);
    }
  } else if (is_commit_hash(revision)) {
    commit = revision;
  } else if (revision.empty()) {
    commit = newest_snapshot(snapshots_dir);
    if (commit.empty()) {
      return not_found("[model] '{}' is in the Hugging Face cache ({}) but has no snapshot; {}",
                       repo_id, repo_dir.string(), download_hint(repo_id, revision));
    }
  } else {
    return not_found(
        "[model] revision '{}' of '{}' is not in the Hugging Face cache ({}; refs: [{}], "
        "snapshots: [{}]); {}",
        revision, repo_id, repo_dir.string(), fmt::join(list_names(repo_dir / "refs"), ", "),
        fmt::join(list_names(snapshots_dir), ", "), download_hint(repo_id, revision));
  }
  const fs::path snapshot = snapshots_dir / commit;
  if (!fs::is_directory(snapshot, ec)) {
    return not_found(
        "[model] '{}' revision '{}' is commit {}, whose snapshot is not in the cache "
        "({}); {}",
        repo_id, ref_name, commit, snapshots_dir.string(), download_hint(repo_id, revision));
  }
  if (!fs::exists(snapshot / "config.json", ec)) {
    return not_found("[model] snapshot {} of '{}' has no config.json (an incomplete download?); {}",
                     snapshot.string(), repo_id, download_hint(repo_id, revision));
  }
  return snapshot.string();
}

Expected<std::string> resolve_model_path(const std::string& model_arg,
                                         const std::string& revision) {
  std::error_code ec;
  if (fs::is_directory(model_arg, ec)) {
    if (!fs::exists(fs::path(model_arg) / "config.json", ec)) {
      return not_found(
          "[model] folder '{}' has no config.json; a model folder holds config.json "
          "and the *.safetensors weights",
          model_arg);
    }
    return model_arg;
  }
  if (fs::exists(model_arg, ec)) {
    return invalid_argument(
        "[model] '{}' is a file; --model takes a model folder or a Hugging "
        "Face repo id (org/name)",
        model_arg);
  }
  if (!looks_like_hf_repo_id(model_arg)) {
    return not_found(
        "[model] '{}' is not a folder (nor a Hugging Face repo id of the form "
        "org/name)",
        model_arg);
  }
  return resolve_in_hf_cache(model_arg, revision, hf_hub_cache_dir());
}

}  // namespace pagellm
