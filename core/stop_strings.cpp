// Stop-string matching on a stream. Invariant: held_ is the longest suffix of the text seen
// so far that is a proper prefix of some stop string, so any stop string that a later push
// completes starts inside held_, and everything before held_ was safe to release.
#include "core/stop_strings.h"

#include <algorithm>

namespace qrun {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopChunk StopStringMatcher::push(std::string_view text) {
  StopChunk out;
  if (stopped()) {
    out.stopped = true;
    return out;
  }
  held_.append(text);
  // A complete stop string: the earliest one wins (the longest among those starting there).
  size_t first = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t at = held_.find(stops_[i]);
    if (at == std::string::npos) continue;
    if (at < first ||
        (at == first && stops_[i].size() > stops_[static_cast<size_t>(matched_)].size())) {
      first = at;
      matched_ = static_cast<int>(i);
    }
  }
  if (first != std::string::npos) {
    out.text = held_.substr(0, first);
    out.stopped = true;
    held_.clear();
    return out;
  }
  // Keep the longest suffix that could still grow into a stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
      if (std::string_view(held_).substr(held_.size() - len) ==
          std::string_view(s).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  out.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringMatcher::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

void StopStringMatcher::reset() {
  held_.clear();
  matched_ = -1;
}

std::string_view StopStringMatcher::matched() const {
  return stopped() ? std::string_view(stops_[static_cast<size_t>(matched_)]) : std::string_view();
}

StopChunk StopStringFilter::push(int32_t token) {
  if (stopped()) return StopChunk{"", true};
  return matcher_.push(decoder_.push(token));
}

std::string StopStringFilter::flush() {
  if (stopped()) return "";
  StopChunk last = matcher_.push(decoder_.flush());
  if (last.stopped) return last.text;
  return last.text + matcher_.flush();
}

void StopStringFilter::reset() {
  decoder_.flush();
  matcher_.reset();
}

}  // namespace qrun
