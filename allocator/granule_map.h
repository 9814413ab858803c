// Which granules of a segment are committed: a bit a granule, read and written a 64-bit word at a
// time. A 4 MiB block lies on 64 host granules of 64 KiB: asking whether all of them are
// committed, which the pool does for every block it hands out from a segment not wholly
// committed, is then one or two words, where a loop over the granules cost about 100 ns.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace monet {

class GranuleMap {
 public:
  // `granules` granules, none committed.
  void assign(std::size_t granules) {
    words_.assign((granules + kBits - 1) / kBits, 0);
    size_ = granules;
  }
  std::size_t size() const { return size_; }  // 0 where the segment is held whole

  bool test(std::size_t g) const { return (words_[g / kBits] >> (g % kBits)) & 1U; }

  // Committed granules in [first, last).
  std::size_t count(std::size_t first, std::size_t last) const {
    std::size_t n = 0;
    for_words(first, last, [&](std::size_t w, std::uint64_t mask) {
      n += static_cast<std::size_t>(__builtin_popcountll(words_[w] & mask));
    });
    return n;
  }
  std::size_t count() const { return count(0, size_); }

  // Marks [first, last) committed (`value`) or not.
  void set(std::size_t first, std::size_t last, bool value) {
    for_words(first, last, [&](std::size_t w, std::uint64_t mask) {
      words_[w] = value ? words_[w] | mask : words_[w] & ~mask;
    });
  }

  // Where a run back from `last` that holds `n` committed granules starts: the largest g in
  // [first, last) such that [g, last) holds n of them (g itself one), or `first` where all of
  // [first, last) holds fewer (an empty range, first >= last, included). A word at a time: a hole's
  // decommitted tail is passed over 64 granules a step, where a test of each granule made giving
  // back memory from a large, mostly decommitted hole take as long as the hole had granules.
  std::size_t start_of_last(std::size_t first, std::size_t last, std::size_t n) const {
    if (n == 0) return last;
    std::size_t found = 0;
    for (std::size_t end = last; end > first;) {
      const std::size_t w = (end - 1) / kBits;
      const std::size_t begin = std::max(first, w * kBits);
      std::uint64_t bits = words_[w];
      if (end % kBits != 0) bits &= ~std::uint64_t{0} >> (kBits - end % kBits);
      bits &= ~std::uint64_t{0} << (begin % kBits);
      const auto in_word = static_cast<std::size_t>(__builtin_popcountll(bits));
      if (found + in_word >= n) {
        // The (n - found)-th highest bit of `bits`.
        for (std::size_t k = n - found; k > 1; --k) {
          bits &= ~(std::uint64_t{1} << (kBits - 1 - __builtin_clzll(bits)));
        }
        return w * kBits + (kBits - 1 - static_cast<std::size_t>(__builtin_clzll(bits)));
      }
      found += in_word;
      end = begin;
    }
    return first;
  }

  // The first granule in [g, last) that is not in state `value` (committed or not), or `last`:
  // where the run of such granules from `g` ends.
  std::size_t run_end(std::size_t g, std::size_t last, bool value) const {
    while (g < last) {
      const std::uint64_t word = value ? ~words_[g / kBits] : words_[g / kBits];
      const std::uint64_t differs = word >> (g % kBits);
      if (differs != 0) {
        return std::min(last, g + static_cast<std::size_t>(__builtin_ctzll(differs)));
      }
      g = (g / kBits + 1) * kBits;
    }
    return last;
  }

 private:
  static constexpr std::size_t kBits = 64;

  // Calls f(word, mask) for each word that [first, last) touches, `mask` its bits in the range.
  template <typename F>
  static void for_words(std::size_t first, std::size_t last, F&& f) {
    if (first >= last) return;
    const std::size_t first_word = first / kBits, last_word = (last - 1) / kBits;
    for (std::size_t w = first_word; w <= last_word; ++w) {
      std::uint64_t mask = ~std::uint64_t{0};
      if (w == first_word) mask &= ~std::uint64_t{0} << (first % kBits);
      if (w == last_word && last % kBits != 0) mask &= ~std::uint64_t{0} >> (kBits - last % kBits);
      f(w, mask);
    }
  }

  std::vector<std::uint64_t> words_;
  std::size_t size_ = 0;
};

}  // namespace monet
