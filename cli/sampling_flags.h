// The sampling flags shared by `qrun run` and `qrun chat`, named as llama.cpp names them
// (--temp, --top-k, --top-p, --min-p, --typical, --repeat-penalty, --repeat-last-n,
// --presence-penalty, --frequency-penalty, --mirostat, --mirostat-lr, --mirostat-ent,
// --logit-bias, --ignore-eos, --stop, -s/--seed, --grammar, --grammar-file, -j/--json-schema,
// --json-schema-file), declared once in a
// table that drives the command line, the chat REPL's /set, /show and --help, and turned into a
// core SamplingParams.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "core/grammar/grammar.h"
#include "core/grammar/grammar_stage.h"
#include "core/sampling/sampling.h"
#include "core/tokenizer/tokenizer.h"
#include "ggml-like/result.h"

namespace qrun::cli {

struct SamplingFlags {
  SamplingParams params;           // llama.cpp's defaults (see core/sampling.h)
  int64_t seed = -1;               // -1: a random seed, reported on stderr
  std::vector<std::string> stops;  // --stop, repeatable, backslash escapes processed
  bool ignore_eos = false;
  std::vector<std::string> logit_bias;  // raw "TOKEN(+|-)BIAS" strings, resolved per model
  // --grammar TEXT, --grammar-file FILE, -j/--json-schema SCHEMA or -jf/--json-schema-file
  // FILE, parsed (converted) when set; on the command line at most one of them.
  std::shared_ptr<const Grammar> grammar;
  std::string grammar_file;  // the path, when the grammar came from --grammar-file
  // The first bad value given on the command line. CLI11 parse errors print two lines, so
  // the flags record it here and resolve_sampling_params reports it as one kUsage line.
  std::optional<Error> error;
};

// Declares every sampling flag on `cmd` (in a "Sampling" help group), bound to `flags`.
// Values are checked as they are parsed; a bad one lands in flags.error.
void add_sampling_flags(CLI::App* cmd, SamplingFlags& flags);

// Declares only the grammar flags (--grammar, --grammar-file, -j/--json-schema,
// --json-schema-file; -jf is spelled --json-schema-file before parsing), as `qrun bench`
// takes them, in a "Grammar" help group.
void add_grammar_flags(CLI::App* cmd, SamplingFlags& flags);

// Sets one flag by its long name without dashes ("temp", "top-k", "stop", ...), as the
// REPL's `/set temp=0.2` does. kUsage naming the flag for an unknown key or a bad value
// (flags unchanged then). "stop" and "logit-bias" append; an empty value clears the list.
// "ignore-eos" takes true/false/1/0/on/off (empty: true). "seed" takes -1 (random) or
// 0..4294967295. "grammar" and "grammar-file" parse the grammar at once (a file is read
// then): errors name the flag, then the line and column; an empty value removes it.
Result<void> set_sampling_flag(SamplingFlags& flags, std::string_view key, std::string_view value);

// "temp=0.8 top-k=40 ..." for /show and logs; every key=value reads back through
// set_sampling_flag (lists are shown as stop="a" stop="b").
std::string describe_sampling_flags(const SamplingFlags& flags);

// The SamplingParams for one model: flags.error if any; the seed (a fresh random one when
// flags.seed is -1); --logit-bias checked against the vocabulary ("--logit-bias 99999+1:
// token 99999 is out of range (the vocabulary has 512 tokens)"); with --ignore-eos, a -inf
// bias on every end-of-generation token, as llama.cpp does. The caller should also pass no
// is_eog to generate() when flags.ignore_eos.
Result<SamplingParams> resolve_sampling_params(const SamplingFlags& flags,
                                               const Tokenizer& tokenizer);

// The grammar of the JSON Schema in `schema` (its text): kUsage from the converter for what it
// refuses, e.g. "unsupported keyword 'not' at $.properties.name".
Result<std::shared_ptr<const Grammar>> json_schema_grammar(std::string_view schema);

// Every token's piece (token_to_piece without special rendering) and their trie, as the
// grammar stage reads them: made once per model (it walks the whole vocabulary). The
// grammar's <text> token elements are bound through `tokenizer`, which must outlive it.
std::shared_ptr<const GrammarVocab> make_tokenizer_grammar_vocab(const Tokenizer& tokenizer);

// With a grammar in `flags`, makes it the constraint of `sampler` (the tokens' pieces from
// `vocab`, made from `tokenizer` when null, and the end-of-generation marks from
// `tokenizer`). kRuntime if the grammar cannot start.
Result<void> attach_grammar(const SamplingFlags& flags, const Tokenizer& tokenizer,
                            std::shared_ptr<const GrammarVocab>& vocab, Sampler& sampler);

}  // namespace qrun::cli
