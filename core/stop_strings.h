// Stop strings over streamed text: text is released as soon as it cannot be the start of a
// stop string, held back while it might be, and a completed stop string (and everything
// after it) is never released. StopStringMatcher works on text; StopStringFilter puts it
// on top of a TokenStreamDecoder, so tokens go in and printable UTF-8 comes out.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace qrun {

// What a push releases: the text safe to print now, and whether a stop string is complete
// (then `text` is everything before it that was still held, and nothing follows).
struct StopChunk {
  std::string text;
  bool stopped = false;
};

class StopStringMatcher {
 public:
  // Empty strings in `stops` are ignored; no stops at all passes text straight through.
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Appends `text`. When several stop strings are complete, the one that starts first
  // wins. After a stop, every push returns {"", true}.
  StopChunk push(std::string_view text);
  // At the end of generation: whatever is still held (it never became a stop string).
  std::string flush();
  void reset();

  bool stopped() const { return matched_ >= 0; }
  // The stop string that ended the text ("" if none).
  std::string_view matched() const;
  // Bytes held back because they could begin a stop string.
  size_t held_bytes() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  int matched_ = -1;  // index into stops_
};

class StopStringFilter {
 public:
  StopStringFilter(const Tokenizer& tokenizer, std::vector<std::string> stops,
                   bool render_special = false)
      : decoder_(tokenizer, render_special), matcher_(std::move(stops)) {}

  // Decodes one token (holding back a partial UTF-8 character) and matches the new text.
  StopChunk push(int32_t token);
  // The end of generation: the decoder's remainder and anything held; "" after a stop.
  std::string flush();
  void reset();

  bool stopped() const { return matcher_.stopped(); }
  std::string_view matched() const { return matcher_.matched(); }

 private:
  TokenStreamDecoder decoder_;
  StopStringMatcher matcher_;
};

}  // namespace qrun
