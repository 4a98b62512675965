// Prompt cache files (`qrun run --prompt-cache`, chat `/save FILE --kv`): the KV state of
// the positions a cache holds and the tokens behind them, so that a later run over a prompt
// that starts with those tokens prefills only the rest.
//
// Layout (host byte order, little-endian on every machine qrun targets):
//   offset 0   char[8]  "QRUNKVC\0"
//   offset 8   uint32   version (1)
//   offset 12  uint32   K type, then uint32 V type at 16 (GGUF type ids)
//   offset 20  uint32   0
//   offset 24  uint64   model fingerprint (prompt_cache_fingerprint of the GGUF header)
//   offset 32  int64    n_layer, n_head_kv, head_dim, n_tokens (at 32, 40, 48, 56)
//   offset 64  int64    per layer: its sliding window (0: none) and the first position stored
//   then       int32    tokens[n_tokens]
//   then, per layer, the K rows of positions first .. n_tokens - 1, then its V rows (a
//   windowed layer's ring no longer holds positions before `first`)
//   last       uint64   checksum (PromptCacheChecksum) of every byte before it
// Files are written to "<path>.tmp" and renamed into place, so a killed run never leaves a
// half-written file under the name.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/kv_cache.h"
#include "ggml-like/result.h"

namespace qrun {

inline constexpr char kPromptCacheMagic[8] = {'Q', 'R', 'U', 'N', 'K', 'V', 'C', '\0'};
inline constexpr uint32_t kPromptCacheVersion = 1;
inline constexpr int64_t kPromptCacheHeaderBytes = 64;

// A 64-bit checksum over a byte stream fed in pieces of any size: four lanes of 8-byte words,
// each step a bijection of its lane, so any single changed byte changes the digest.
class PromptCacheChecksum {
 public:
  void update(std::span<const uint8_t> bytes);
  uint64_t digest() const;

 private:
  void block(const uint8_t* p);
  uint64_t lanes_[4] = {0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL, 0x165667b19e3779f9ULL,
                        0x27d4eb2f165667c5ULL};
  uint8_t pending_[32] = {};
  size_t n_pending_ = 0;
  uint64_t n_total_ = 0;
};

// The fingerprint of a model: the checksum of its GGUF header bytes (gguf::File::header_bytes).
uint64_t prompt_cache_fingerprint(std::span<const uint8_t> gguf_header);

// Writes the cache's positions 0 .. kv.n_tokens() - 1 and `tokens` (kv.n_tokens() of them)
// to `path` through "<path>.tmp". Errors: kIo naming the file (nothing is left under either
// name).
Result<void> save_prompt_cache(const std::string& path, uint64_t fingerprint, const KvCache& kv,
                               std::span<const int32_t> tokens);

struct PromptCacheLoad {
  bool found = false;           // the file exists
  std::vector<int32_t> tokens;  // the tokens the file holds (when it was read)
  int64_t n_common = 0;         // of those, the prefix shared with the prompt
  int64_t n_restored = 0;       // positions now in the cache (0: a cold start)
  std::string problem;          // why nothing was restored, when the file exists ("" if it was)
};

// How many of the `n_common` leading prompt tokens that a file shares to restore, at most
// max_keep, when the rest of a prompt of n_prompt tokens is fed in batches of n_batch
// (n_batch <= 0: as many as allowed). The CPU kernels take another path for a batch of one
// token than for larger ones, equal only up to float rounding; so the count is lowered until
// the last batch fed holds one token exactly when it does in a cold run of the whole prompt,
// and each row then goes through the same kernels as there (greedy output stays identical).
int64_t prompt_cache_keep(int64_t n_common, int64_t max_keep, int64_t n_prompt, int64_t n_batch);

// Restores into `kv` (empty) the positions of the longest prefix shared by the file's tokens
// and `prompt`, as many as prompt_cache_keep(common, max_keep, prompt.size(), n_batch) says
// (the caller leaves at least one prompt token to feed). Never an error: a missing file, a
// malformed or truncated one, a checksum mismatch, another model's (other fingerprint) or other
// cache types or shapes leave `kv` empty and say why in `problem`, naming the file; so does a
// prefix that a windowed layer no longer holds.
PromptCacheLoad load_prompt_cache(const std::string& path, uint64_t fingerprint, KvCache& kv,
                                  std::span<const int32_t> prompt, int64_t max_keep,
                                  int64_t n_batch = 0);

}  // namespace qrun
