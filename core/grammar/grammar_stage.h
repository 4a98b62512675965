// The grammar as a sampling constraint: a token is allowed when its text (its piece, as
// token_to_piece without special rendering) keeps the grammar matcher alive, and an
// end-of-generation token when the grammar can end there. Pieces are passed in, so the
// stage does not depend on a tokenizer; cli builds them from the model's vocabulary.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/grammar/grammar.h"
#include "core/grammar/vocab_trie.h"
#include "core/sampling/sampling.h"
#include "ggml-like/result.h"

namespace qrun {

// A vocabulary as the grammar stage reads it, built once per model and shared by every
// stage (and run) on it: the pieces and their trie.
struct GrammarVocab {
  std::vector<std::string> pieces;  // pieces[id]: token id's text
  VocabTrie trie;                   // every token with a non-empty piece
  // The tokens a text is (special tokens parsed), to bind the grammar's <text> token
  // elements; null: the tokens whose piece is the text.
  std::function<std::vector<int32_t>(std::string_view)> tokenize;
};
std::shared_ptr<const GrammarVocab> make_grammar_vocab(
    std::vector<std::string> pieces,
    std::function<std::vector<int32_t>(std::string_view)> tokenize = nullptr);

// pieces[id] is token id's text; is_eog[id] marks end-of-generation tokens. Tokens with an
// empty piece that are not end-of-generation are allowed only by token elements (<[id]>),
// which take a token whole by id. The grammar's <text> elements are bound to the vocabulary
// first (kUsage when one is not a single token, or <[id]> is outside it). If no token fits at some
// point (the vocabulary cannot spell what the grammar needs), the end-of-generation tokens
// are allowed so that generation ends. kRuntime if the grammar cannot start (too many
// positions).
Result<std::unique_ptr<ConstraintStage>> make_grammar_stage(std::shared_ptr<const Grammar> grammar,
                                                            std::vector<std::string> pieces,
                                                            std::vector<uint8_t> is_eog);
// The same on a vocabulary built once. With a `trigger` the grammar is lazy (llama.cpp's
// lazy grammars, which tool calling uses): every token passes until the text generated
// contains the trigger, and from there on the grammar holds the text from the trigger on.
// A trigger that the vocabulary's tokenize gives as one control token (a token with no
// printed text, such as Mistral's [TOOL_CALLS]) fires when that token is sampled, and the
// grammar then holds the text after it. Text from the trigger on that the grammar cannot
// take lifts the constraint for the rest of the generation instead of failing it.
Result<std::unique_ptr<ConstraintStage>> make_grammar_stage(
    std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab,
    std::vector<uint8_t> is_eog, std::string trigger = "");

}  // namespace qrun
