// What every generating subcommand (run, chat, bench, perplexity) needs: the model flags
// declared once, and a Session that holds the mapped file, tokenizer, model, backend and
// KV cache, loaded in that order with one-line errors.
#pragma once

#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/gguf/gguf.h"
#include "core/grammar/grammar_stage.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "core/tokenizer/tokenizer.h"
#include "ggml-like/backend.h"

namespace qrun::cli {

struct ModelFlags {
  std::string model;     // empty: the embedded demo model
  int threads = 0;       // <= 0: one per physical core
  int64_t ctx_size = 0;  // <= 0: the model's context length, capped at kDefaultMaxCtx
  int64_t batch_size = 512;
  int64_t n_seq = 1;  // sequences one batched forward step holds (serve's -np; no flag)
  std::string cache_type = "f16";  // --cache-type: both K and V
  std::string cache_type_k;        // -ctk: K alone (empty: cache_type)
  std::string cache_type_v;        // -ctv: V alone (empty: cache_type)
  bool warmup = true;              // one forward pass at load (--no-warmup turns it off)
  std::string n_gpu_layers = "0";  // -ngl: 0 (the CPU) or all (the CUDA backend)
};

inline constexpr int64_t kDefaultMaxCtx = 4096;

// Declares -m, -t, -c, -b, --cache-type, -ctk/--cache-type-k, -ctv/--cache-type-v,
// -ngl/--n-gpu-layers and --no-warmup on `cmd`, bound to `flags`.
void add_model_flags(CLI::App* cmd, ModelFlags& flags);

// The KV cache types the flags choose: -ctk and -ctv each override --cache-type for their
// half, whatever the order.
KvTypes kv_types(const ModelFlags& flags);
// The same as text: "q8_0" when K and V agree, else "K q8_0, V f16".
std::string kv_types_text(const KvTypes& types);
// Declares -ctk/--cache-type-k, -ctv/--cache-type-v and --cache-type on a command that does
// not load a model (qrun info), bound to `flags`.
void add_cache_type_flags(CLI::App* cmd, ModelFlags& flags);
// A KV cache shaped for `model` with the flags' types and n_ctx, its errors naming the flag
// (a quantized type needs head_dim a multiple of 32; -c too large for this machine).
Result<KvCache> make_flagged_kv_cache(const Model& model, const ModelFlags& flags, int64_t n_ctx);

struct Session {
  gguf::File file;
  std::string model_name;  // the path, or the demo model's name
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
  KvCache kv;
  double load_ms = 0.0;
  std::shared_ptr<const GrammarVocab> grammar_vocab{};  // made at the first grammar
};

// Loads everything. `log` says on stderr what was loaded (and that the demo model is used
// when no -m was given). With flags.warmup, one token goes through the model before the load
// time is taken (and the cache is cleared again), as llama.cpp warms up: the weights are
// paged in and the backend makes its repacked copies then, not in the first prompt.
Result<std::unique_ptr<Session>> open_session(const ModelFlags& flags, bool log);

}  // namespace qrun::cli
