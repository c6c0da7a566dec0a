#include "structured/token_set.h"

#include <bit>

namespace pagellm::structured {

namespace {

// Sets the bits of ids [from, to).
void set_bits(std::span<uint32_t> words, int32_t from, int32_t to) {
  while (from < to && (from & 31) != 0) set_bit(words, from++);
  for (; from + 32 <= to; from += 32) words[static_cast<size_t>(from) >> 5] = ~uint32_t{0};
  while (from < to) set_bit(words, from++);
}

}  // namespace

TokenSet TokenSet::from_bits(std::span<const uint32_t> words, int32_t num_ids) {
  TokenSet set;
  set.num_ids_ = num_ids;
  const size_t num_words = (static_cast<size_t>(num_ids) + 31) / 32;
  size_t count = 0;
  for (size_t w = 0; w < num_words; ++w) count += static_cast<size_t>(std::popcount(words[w]));
  const size_t absent = static_cast<size_t>(num_ids) - count;
  if (count <= num_words || absent <= num_words) {
    set.form_ = count <= absent ? Form::kIds : Form::kAllBut;
    const bool want = set.form_ == Form::kIds;
    set.ids_.reserve(want ? count : absent);
    for (size_t w = 0; w < num_words; ++w) {  // word by word: only the listed bits cost anything
      uint32_t bits = want ? words[w] : ~words[w];
      while (bits != 0) {
        const auto id = static_cast<int32_t>(w * 32 + static_cast<size_t>(std::countr_zero(bits)));
        if (id >= num_ids) break;
        set.ids_.push_back(id);
        bits &= bits - 1;
      }
    }
  } else {
    set.form_ = Form::kBitmap;
    set.bitmap_.assign(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(num_words));
  }
  return set;
}

void TokenSet::add_to(std::span<uint32_t> words) const {
  switch (form_) {
    case Form::kIds:
      for (int32_t id : ids_) set_bit(words, id);
      return;
    case Form::kBitmap:
      for (size_t w = 0; w < bitmap_.size(); ++w) words[w] |= bitmap_[w];
      return;
    case Form::kAllBut: {
      int32_t from = 0;
      for (int32_t id : ids_) {
        set_bits(words, from, id);
        from = id + 1;
      }
      set_bits(words, from, num_ids_);
      return;
    }
  }
}

}  // namespace pagellm::structured
