// TokenSet: a set of token ids stored in whichever form is smallest — the ids, the ids NOT in
// it, or a bitmap — since cached masks are mostly "a few structural tokens" or "nearly all".
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace pagellm::structured {

class TokenSet {
 public:
  // The set bits of `words` among ids [0, num_ids).
  static TokenSet from_bits(std::span<const uint32_t> words, int32_t num_ids);
  // ORs the set into a mask of 32-bit words.
  void add_to(std::span<uint32_t> words) const;
  size_t bytes() const { return (ids_.size() + bitmap_.size()) * 4; }

 private:
  enum class Form : uint8_t { kIds, kAllBut, kBitmap };
  Form form_ = Form::kIds;
  int32_t num_ids_ = 0;
  std::vector<int32_t> ids_;
  std::vector<uint32_t> bitmap_;
};

inline void set_bit(std::span<uint32_t> words, int32_t id) {
  words[static_cast<size_t>(id) >> 5] |= uint32_t{1} << (id & 31);
}
inline bool test_bit(std::span<const uint32_t> words, int32_t id) {
  return (words[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1;
}

}  // namespace pagellm::structured
