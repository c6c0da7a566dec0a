// FlatStringMap: string -> uint64 hash map for the encoder's hot lookups (vocabulary, word cache).
// Open addressing over one array of slots (hash, key offset, value) with the key bytes in one
// arena, so a lookup is usually one cache miss plus a memcmp, unlike std::unordered_map's nodes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace pagellm {

class FlatStringMap {
 public:
  FlatStringMap() { rehash(16); }

  static uint64_t hash(std::string_view s) {
    // 8 bytes at a time, multiply-xorshift mixing; never 0 (0 marks an empty slot).
    constexpr uint64_t kMul = 0x9E3779B97F4A7C15ULL;
    uint64_t h = 0x243F6A8885A308D3ULL ^ (s.size() * kMul);
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      h = (h ^ w) * kMul;
      h ^= h >> 29;
    }
    if (i < s.size()) {
      uint64_t w = 0;
      std::memcpy(&w, s.data() + i, s.size() - i);
      h = (h ^ w) * kMul;
      h ^= h >> 29;
    }
    h *= kMul;
    h ^= h >> 32;
    return h | 1;
  }

  const uint64_t* find(std::string_view key) const { return find(key, hash(key)); }
  const uint64_t* find(std::string_view key, uint64_t h) const {
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.hash == 0) return nullptr;
      if (s.hash == h && s.key_len == key.size() &&
          std::memcmp(arena_.data() + s.key_offset, key.data(), key.size()) == 0) {
        return &s.value;
      }
    }
  }

  // Inserts, or overwrites the value of an existing key.
  void insert(std::string_view key, uint64_t value) { insert(key, hash(key), value); }
  void insert(std::string_view key, uint64_t h, uint64_t value) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.hash == 0) {
        s = {h, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), value};
        arena_.append(key);
        ++size_;
        return;
      }
      if (s.hash == h && s.key_len == key.size() &&
          std::memcmp(arena_.data() + s.key_offset, key.data(), key.size()) == 0) {
        s.value = value;
        return;
      }
    }
  }

  size_t size() const { return size_; }
  size_t arena_bytes() const { return arena_.size(); }
  void clear() {
    slots_.assign(slots_.size(), Slot{});
    arena_.clear();
    size_ = 0;
  }
  void reserve(size_t count) {
    size_t capacity = 16;
    while (capacity < count * 2) capacity <<= 1;
    if (capacity > slots_.size()) rehash(capacity);
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_offset = 0;
    uint32_t key_len = 0;
    uint64_t value = 0;
  };

  void rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (const Slot& s : old) {
      if (s.hash == 0) continue;
      for (size_t i = s.hash & mask_;; i = (i + 1) & mask_) {
        if (slots_[i].hash == 0) {
          slots_[i] = s;
          break;
        }
      }
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
  std::string arena_;
};

}  // namespace pagellm
