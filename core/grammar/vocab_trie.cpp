// Builds the trie by sorting the pieces: in byte order, each piece adds one node per byte
// past its longest common prefix with the piece before it, which is the preorder.
#include "core/grammar/vocab_trie.h"

#include <algorithm>
#include <numeric>
#include <string_view>

#include "ggml-like/result.h"

namespace qrun {

VocabTrie::VocabTrie(std::span<const std::string> pieces, std::span<const uint8_t> include) {
  QRUN_CHECK(pieces.size() < UINT32_MAX / 2, "vocabulary of %zu tokens", pieces.size());
  for (size_t id = 0; id < pieces.size(); ++id) {
    if (pieces[id].empty() || (id < include.size() && include[id] == 0)) continue;
    tokens_.push_back(static_cast<int32_t>(id));
  }
  std::stable_sort(tokens_.begin(), tokens_.end(), [&](int32_t a, int32_t b) {
    return pieces[static_cast<size_t>(a)] < pieces[static_cast<size_t>(b)];
  });
  position_.assign(pieces.size(), -1);
  for (size_t t = 0; t < tokens_.size(); ++t) {
    position_[static_cast<size_t>(tokens_[t])] = static_cast<int32_t>(t);
  }
  nodes_.clear();
  std::string_view prev;
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string_view piece = pieces[static_cast<size_t>(tokens_[t])];
    const size_t n = std::min(prev.size(), piece.size());
    size_t lcp = 0;
    while (lcp < n && prev[lcp] == piece[lcp]) ++lcp;
    for (size_t k = lcp; k < piece.size(); ++k) {
      nodes_.push_back(Node{0, static_cast<uint32_t>(k + 1), static_cast<uint32_t>(t),
                            static_cast<uint8_t>(piece[k])});
    }
    max_depth_ = std::max(max_depth_, static_cast<uint32_t>(piece.size()));
    prev = piece;
  }
  // subtree_end: a node's subtree ends at the next node that is not deeper.
  std::vector<uint32_t> open;  // nodes whose subtree is still open, by depth
  for (size_t i = 0; i < nodes_.size(); ++i) {
    while (!open.empty() && nodes_[open.back()].depth >= nodes_[i].depth) {
      nodes_[open.back()].subtree_end = static_cast<uint32_t>(i);
      open.pop_back();
    }
    open.push_back(static_cast<uint32_t>(i));
  }
  for (uint32_t i : open) nodes_[i].subtree_end = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back(Node{0, 0, static_cast<uint32_t>(tokens_.size()), 0});  // the sentinel
  nodes_.back().subtree_end = static_cast<uint32_t>(nodes_.size() - 1);
}

}  // namespace qrun
