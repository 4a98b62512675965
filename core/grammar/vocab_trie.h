// A byte trie of a vocabulary's token pieces, built once per vocabulary, so that the grammar
// stage checks the tokens sharing a prefix against the grammar once per prefix (and skips a
// whole subtree the grammar rejects) instead of once per token. The nodes are stored in
// preorder: a node's subtree is the run of nodes up to its subtree_end, and its parent is
// the nearest earlier node one level up.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace qrun {

class VocabTrie {
 public:
  struct Node {
    uint32_t subtree_end;  // index of the first node after this node's subtree
    uint32_t depth;        // bytes from the root: 1 for a first byte
    uint32_t tok_begin;    // this node's tokens are tokens()[tok_begin, next node's tok_begin)
    uint8_t byte;          // the byte on the edge into this node
  };

  VocabTrie() = default;
  // Every token whose piece is not empty and that include[id] marks (ids past the end of
  // include count as marked).
  VocabTrie(std::span<const std::string> pieces, std::span<const uint8_t> include);

  size_t n_nodes() const { return nodes_.size() - 1; }  // without the sentinel
  uint32_t max_depth() const { return max_depth_; }
  const Node& node(size_t i) const { return nodes_[i]; }
  // The tokens whose piece ends at node i (several tokens may share one piece).
  std::span<const int32_t> tokens_at(size_t i) const {
    return std::span<const int32_t>(tokens_).subspan(nodes_[i].tok_begin,
                                                     nodes_[i + 1].tok_begin - nodes_[i].tok_begin);
  }
  // Where token `id` sits in the preorder token list (the positions of node i's subtree are
  // [node(i).tok_begin, node(node(i).subtree_end).tok_begin)); -1 when it is not in the trie.
  int32_t position(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < position_.size()
               ? position_[static_cast<size_t>(id)]
               : -1;
  }
  // The tokens anywhere in node i's subtree.
  std::span<const int32_t> tokens_under(size_t i) const {
    const uint32_t end = nodes_[nodes_[i].subtree_end].tok_begin;
    return std::span<const int32_t>(tokens_).subspan(nodes_[i].tok_begin,
                                                     end - nodes_[i].tok_begin);
  }

 private:
  std::vector<Node> nodes_{Node{0, 0, 0, 0}};  // preorder, then a sentinel
  std::vector<int32_t> tokens_;                // token ids in the pieces' byte order
  std::vector<int32_t> position_;              // by token id: its index in tokens_, or -1
  uint32_t max_depth_ = 0;
};

}  // namespace qrun
