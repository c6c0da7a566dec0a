#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <climits>
#include <queue>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace pagellm {

using json = nlohmann::json;

// Open-addressing hash map (pair of ids) -> (rank, merged id). Lookups dominate encoding time,
// so the table is a flat array probed linearly, kept at most half full.
struct BpeModel::MergeTable {
  struct Slot {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t new_id = 0;
  };
  static constexpr uint64_t kEmpty = ~0ULL;

  explicit MergeTable(size_t count) {
    size_t capacity = 16;
    while (capacity < count * 2) capacity <<= 1;
    slots.resize(capacity);
    mask = capacity - 1;
  }
  static uint64_t key_of(int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }
  static size_t hash(uint64_t key) { return size_t((key * 0x9E3779B97F4A7C15ULL) >> 20); }

  // A pair listed twice keeps its last rank: HF collects the merges into a map in order.
  void insert(int32_t a, int32_t b, int32_t rank, int32_t new_id) {
    const uint64_t key = key_of(a, b);
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == key) {
        slots[i].rank = rank;
        slots[i].new_id = new_id;
        return;
      }
      if (slots[i].key == kEmpty) {
        slots[i] = {key, rank, new_id};
        return;
      }
    }
  }
  const Slot* find(int32_t a, int32_t b) const {
    const uint64_t key = key_of(a, b);
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == key) return &slots[i];
      if (slots[i].key == kEmpty) return nullptr;
    }
  }

  std::vector<Slot> slots;
  size_t mask = 0;
};

// Word -> ids cache, sharded so that concurrent encoders rarely share a lock. A shard that
// fills up is cleared: simple, and words repeat within a text far more than across texts.
struct BpeModel::WordCache {
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 16384;
  static constexpr size_t kMaxWordBytes = 64;
  struct Shard {
    std::mutex mutex;
    FlatStringMap map;          // word -> (offset into ids << 8) | count
    std::vector<int32_t> ids;
  };
  Shard shards[kShards];

  static size_t shard_of(uint64_t hash) { return (hash >> 40) % kShards; }

  bool lookup(std::string_view word, uint64_t hash, std::vector<int32_t>& out) {
    Shard& shard = shards[shard_of(hash)];
    std::lock_guard lock(shard.mutex);
    const uint64_t* v = shard.map.find(word, hash);
    if (!v) return false;
    const int32_t* ids = shard.ids.data() + (*v >> 8);
    out.insert(out.end(), ids, ids + (*v & 0xFF));
    return true;
  }
  void store(std::string_view word, uint64_t hash, const int32_t* ids, size_t count) {
    if (count > 0xFF) return;
    Shard& shard = shards[shard_of(hash)];
    std::lock_guard lock(shard.mutex);
    if (shard.map.size() >= kMaxEntriesPerShard) {
      shard.map.clear();
      shard.ids.clear();
    }
    shard.map.insert(word, hash, (uint64_t(shard.ids.size()) << 8) | count);
    shard.ids.insert(shard.ids.end(), ids, ids + count);
  }
};

BpeModel::~BpeModel() = default;

Expected<std::unique_ptr<BpeModel>> BpeModel::from_json(const json& model, bool byte_level_input) {
  if (!model.is_object()) return invalid_argument("[tokenizer] \"model\" must be an object");
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") return unimplemented("[tokenizer] unsupported model type '{}'", type);
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
    return unimplemented("[tokenizer] unsupported BPE feature: dropout");
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return invalid_argument("[tokenizer] BPE model needs a \"vocab\" object");
  }
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return invalid_argument("[tokenizer] BPE model needs a \"merges\" array");
  }
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  bpe->byte_level_input_ = byte_level_input;
  auto string_or_empty = [&](const char* key) {
    return model.contains(key) && model[key].is_string() ? model[key].get<std::string>()
                                                         : std::string();
  };
  bpe->continuing_subword_prefix_ = string_or_empty("continuing_subword_prefix");
  bpe->end_of_word_suffix_ = string_or_empty("end_of_word_suffix");
  bpe->byte_fallback_ = model.value("byte_fallback", false);
  bpe->fuse_unk_ = model.value("fuse_unk", false);
  bpe->ignore_merges_ = model.value("ignore_merges", false);
  if (byte_level_input &&
      (!bpe->continuing_subword_prefix_.empty() || !bpe->end_of_word_suffix_.empty())) {
    return unimplemented(
        "[tokenizer] unsupported BPE feature: continuing_subword_prefix/end_of_word_suffix with "
        "a ByteLevel pre-tokenizer");
  }

  // Vocabulary.
  const json& vocab = model["vocab"];
  bpe->vocab_.reserve(vocab.size());
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) {
      return invalid_argument("[tokenizer] vocab entry '{}' must map to an integer id", it.key());
    }
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > kMaxTokenId) {
      return invalid_argument("[tokenizer] vocab id {} of '{}' is out of range [0, {}]", id, it.key(),
                              kMaxTokenId);
    }
    max_id = std::max(max_id, id);
    bpe->vocab_[it.key()] = static_cast<int32_t>(id);
  }
  bpe->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  bpe->has_id_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, id] : bpe->vocab_) {
    bpe->id_to_token_[id] = token;
    bpe->has_id_[id] = true;
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const std::string unk = model["unk_token"].get<std::string>();
    auto it = bpe->vocab_.find(unk);
    if (it == bpe->vocab_.end()) {
      return invalid_argument("[tokenizer] unk_token '{}' is not in the vocabulary", unk);
    }
    bpe->unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = bpe->vocab_.find(fmt::format("<0x{:02X}>", b));
    bpe->byte_fallback_ids_[b] = it == bpe->vocab_.end() ? -1 : it->second;
  }
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  for (int b = 0; b < 256; ++b) {
    auto it = bpe->vocab_.find(alphabet.char_of(static_cast<uint8_t>(b)));
    bpe->byte_to_id_[b] = (byte_level_input && it != bpe->vocab_.end()) ? it->second : -1;
  }
  bpe->word_vocab_.reserve(bpe->vocab_.size());
  for (const auto& [token, id] : bpe->vocab_) {
    if (!byte_level_input) {
      bpe->word_vocab_.insert(token, static_cast<uint64_t>(id));
    } else if (auto bytes = alphabet.decode(token)) {
      // Tokens with characters outside the alphabet can never be produced from bytes.
      bpe->word_vocab_.insert(*bytes, static_cast<uint64_t>(id));
    }
  }

  // Merges: "a b" strings (older files) or ["a", "b"] pairs.
  const json& merges = model["merges"];
  bpe->merges_ = std::make_unique<MergeTable>(merges.size());
  const size_t prefix_len = bpe->continuing_subword_prefix_.size();
  std::string a, b;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    if (m.is_string()) {
      const std::string& line = m.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return invalid_argument("[tokenizer] merge {} '{}' is not two tokens separated by a space",
                                rank, line);
      }
      a = line.substr(0, space);
      b = line.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return invalid_argument("[tokenizer] merge {} must be \"a b\" or [\"a\", \"b\"]", rank);
    }
    auto ia = bpe->vocab_.find(a);
    auto ib = bpe->vocab_.find(b);
    if (ia == bpe->vocab_.end() || ib == bpe->vocab_.end()) {
      return invalid_argument("[tokenizer] merge {} ('{}', '{}') uses a token not in the vocab",
                              rank, a, b);
    }
    const std::string merged = a + (b.size() >= prefix_len ? b.substr(prefix_len) : std::string());
    auto im = bpe->vocab_.find(merged);
    if (im == bpe->vocab_.end()) {
      return invalid_argument("[tokenizer] merge {} result '{}' is not in the vocab", rank, merged);
    }
    bpe->merges_->insert(ia->second, ib->second, static_cast<int32_t>(rank), im->second);
  }
  bpe->cache_ = std::make_unique<WordCache>();
  return bpe;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

// The word's characters (bytes for byte-level input) as initial symbols, with HF's treatment of
// characters missing from the vocabulary: byte fallback to <0xHH> tokens, else unk (fused when
// fuse_unk), else dropped. As in HF, a pending unk is emitted only when a known character or the
// end of the word follows, even if byte-fallback tokens came in between.
void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const {
  std::optional<int32_t> pending_unk;
  auto on_missing = [&](std::string_view s) {
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char c : s) all = all && byte_fallback_ids_[c] >= 0;
      if (all) {
        for (unsigned char c : s) symbols.push_back(byte_fallback_ids_[c]);
        return;
      }
    }
    if (!unk_id_) return;
    if (pending_unk && !fuse_unk_) symbols.push_back(*pending_unk);
    pending_unk = *unk_id_;
  };
  auto on_known = [&](int32_t id) {
    if (pending_unk) {
      symbols.push_back(*pending_unk);
      pending_unk.reset();
    }
    symbols.push_back(id);
  };

  if (byte_level_input_) {
    for (unsigned char c : word) {
      const int32_t id = byte_to_id_[c];
      if (id >= 0) {
        on_known(id);
      } else {
        on_missing(ByteLevelAlphabet::get().char_of(c));
      }
    }
  } else if (continuing_subword_prefix_.empty() && end_of_word_suffix_.empty()) {
    size_t pos = 0;
    while (pos < word.size()) {
      const size_t start = pos;
      utf8::decode_at(word, pos);
      const std::string_view ch = word.substr(start, pos - start);
      if (const uint64_t* id = word_vocab_.find(ch)) {
        on_known(static_cast<int32_t>(*id));
      } else {
        on_missing(ch);
      }
    }
  } else {
    size_t pos = 0;
    std::string s;
    while (pos < word.size()) {
      const size_t start = pos;
      utf8::decode_at(word, pos);
      s.clear();
      if (start > 0) s += continuing_subword_prefix_;
      s.append(word.substr(start, pos - start));
      if (pos == word.size()) s += end_of_word_suffix_;
      auto it = vocab_.find(s);
      if (it != vocab_.end()) {
        on_known(it->second);
      } else {
        on_missing(s);
      }
    }
  }
  if (pending_unk) symbols.push_back(*pending_unk);
}

// Short words: keep the rank of every adjacent pair in an array, merge the lowest (leftmost on
// ties) and refresh only the two neighbouring ranks.
void BpeModel::merge_small(std::vector<int32_t>& symbols) const {
  const size_t n = symbols.size();
  if (n < 2) return;
  int32_t ranks[64];
  int32_t merged[64];
  for (size_t i = 0; i + 1 < n; ++i) {
    const auto* slot = merges_->find(symbols[i], symbols[i + 1]);
    ranks[i] = slot ? slot->rank : INT32_MAX;
    merged[i] = slot ? slot->new_id : -1;
  }
  size_t count = n;
  while (count > 1) {
    size_t best = 0;
    int32_t best_rank = ranks[0];
    for (size_t i = 1; i + 1 < count; ++i) {
      if (ranks[i] < best_rank) {
        best_rank = ranks[i];
        best = i;
      }
    }
    if (best_rank == INT32_MAX) break;
    symbols[best] = merged[best];
    // Remove symbol best+1 and pair best.
    for (size_t i = best + 1; i + 1 < count; ++i) symbols[i] = symbols[i + 1];
    for (size_t i = best; i + 2 < count; ++i) {
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --count;
    auto refresh = [&](size_t i) {
      const auto* slot = merges_->find(symbols[i], symbols[i + 1]);
      ranks[i] = slot ? slot->rank : INT32_MAX;
      merged[i] = slot ? slot->new_id : -1;
    };
    if (best > 0) refresh(best - 1);
    if (best + 1 < count) refresh(best);
  }
  symbols.resize(count);
}

// Long words: HF's algorithm proper, a heap of candidate merges ordered by (rank, position) over a
// linked list of symbols, so a 100 kB word costs O(n log n) rather than O(n^2).
void BpeModel::merge_large(std::vector<int32_t>& symbols) const {
  const size_t n = symbols.size();
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push_pair = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const auto* slot = merges_->find(symbols[pos], symbols[next[pos]])) {
      heap.push({slot->rank, pos, slot->new_id});
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push_pair(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const auto* slot = merges_->find(symbols[top.pos], symbols[next[top.pos]]);
    if (!slot || slot->rank != top.rank) continue;  // stale: the pair changed since pushed
    const int32_t right = next[top.pos];
    symbols[top.pos] = top.new_id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    push_pair(prev[top.pos]);
    push_pair(top.pos);
  }
  size_t out = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) symbols[out++] = symbols[i];
  symbols.resize(out);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  const uint64_t hash = FlatStringMap::hash(word);
  if (ignore_merges_) {
    if (const uint64_t* id = word_vocab_.find(word, hash)) {
      out.push_back(static_cast<int32_t>(*id));
      return;
    }
  }
  const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
  if (cacheable && cache_->lookup(word, hash, out)) return;
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  initial_symbols(word, symbols);
  if (symbols.size() <= 64) {
    merge_small(symbols);
  } else {
    merge_large(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) cache_->store(word, hash, symbols.data(), symbols.size());
}

}  // namespace pagellm
