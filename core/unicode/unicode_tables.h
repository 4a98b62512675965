// Compressed Unicode 15.1 property tables (as llama.cpp's) used by the tokenizers, generated into
// core/unicode_tables*.cpp by scripts/gen_unicode_tables.py (Python's unicodedata).
// Every table is sorted by its first code point, so lookups are binary searches.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qrun::unicode {

// The coarse general category of a code point (the first letter of its Unicode category;
// kUndefined for unassigned code points, Cn).
enum class Category : uint8_t {
  kUndefined,
  kNumber,       // \p{N}
  kLetter,       // \p{L}
  kSeparator,    // \p{Z}
  kMark,         // \p{M}
  kPunctuation,  // \p{P}
  kSymbol,       // \p{S}
  kControl,      // \p{C} other than Cn
};

namespace tables {

// Code points from `first` up to the next run's first have category `category`.
struct CategoryRun {
  uint32_t first;
  Category category;
};
// first + k * stride lowercases to first + k * stride + delta, for k < count.
struct LowerRun {
  uint32_t first;
  uint16_t count;
  uint8_t stride;
  int32_t delta;
};
// Every code point in [first, last] has an NFD decomposition that starts with nfd.
struct NfdRange {
  uint32_t first;
  uint32_t last;
  uint32_t nfd;
};

extern const char* const kUnicodeVersion;
extern const CategoryRun kCategoryRuns[];
extern const size_t kCategoryRunCount;
extern const LowerRun kLowerRuns[];
extern const size_t kLowerRunCount;
extern const NfdRange kNfdRanges[];
extern const size_t kNfdRangeCount;

}  // namespace tables
}  // namespace qrun::unicode
