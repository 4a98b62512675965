// The KL-divergence base file: one model's log-probabilities over a tokenized text, in the
// format of llama.cpp's `llama-perplexity --kl-divergence-base`, so that either tool reads
// the other's files. Written while measuring perplexity; read back to compare another run.
//
// Layout (host byte order, little-endian on every machine qrun and llama.cpp target):
//   offset 0    char[8]  "_logits_"
//   offset 8    int32    n_ctx     tokens per chunk
//   offset 12   int32    n_vocab
//   offset 16   int32    n_chunk
//   offset 20   int32    tokens[n_chunk * n_ctx]   as tokenized; the BOS that perplexity
//                                                  writes over each chunk's first token is not
//   then, per chunk, kld_scored_per_chunk(n_ctx) rows: positions n_ctx/2 .. n_ctx-2 of the
//   chunk, row r holding the distribution that predicts token n_ctx/2 + r + 1. A row is
//   kld_row_words(n_vocab) uint16: float scale and float min_log_prob (4 words), then one
//   word q[i] per vocabulary entry, then a zero word when n_vocab is odd. The log-probability
//   of token i is min_log_prob + scale * q[i]. Log-probabilities more than 16 below the
//   row's maximum share q = 0 (they are clipped), so scale <= 16 / 65535.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/gguf/replacing_file.h"
#include "ggml-like/result.h"

namespace qrun {

inline constexpr char kKldMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};
inline constexpr int64_t kKldHeaderBytes = 20;

// Scored positions per chunk: the second half, less the last (it predicts nothing).
inline int64_t kld_scored_per_chunk(int64_t n_ctx) {
  return n_ctx - 1 - n_ctx / 2;
}
// uint16 words per row: 4 for the two floats, n_vocab rounded up to even.
inline int64_t kld_row_words(int64_t n_vocab) {
  return 4 + 2 * ((n_vocab + 1) / 2);
}

// Encodes one row of logits (n_vocab floats) as log-probabilities into `row`
// (kld_row_words(n_vocab) words), rounding each to the nearest step of scale.
void encode_log_probs(std::span<const float> logits, std::span<uint16_t> row);

// The two floats at the start of a row, and one decoded log-probability.
float kld_row_scale(std::span<const uint16_t> row);
float kld_row_min_log_prob(std::span<const uint16_t> row);
inline float decode_log_prob(float scale, float min_log_prob, uint16_t q) {
  return scale * static_cast<float>(q) + min_log_prob;
}

struct KldBaseHeader {
  int64_t n_ctx = 0;
  int64_t n_vocab = 0;
  int64_t n_chunk = 0;
};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Writes a base file chunk by chunk. finish() must follow the last chunk; a writer
// dropped earlier leaves a truncated file, which the reader rejects.
class KldBaseWriter {
 public:
  // tokens: n_chunk * n_ctx of them (n_chunk >= 1). Errors: kIo naming the path.
  static Result<KldBaseWriter> create(const std::string& path, int64_t n_ctx, int64_t n_vocab,
                                      std::span<const int32_t> tokens);
  // One chunk's scored logits, [kld_scored_per_chunk(n_ctx), n_vocab].
  Result<void> append_chunk(std::span<const float> scored_logits);
  // Checks that every chunk was written, closes the file and puts it in place: until then
  // (and for good when finish() is never reached) it is "<path>.tmp", so an interrupted run
  // leaves an earlier base file whole.
  Result<void> finish();

 private:
  std::string path_;
  std::optional<ReplacingFile> file_;
  KldBaseHeader header_;
  int64_t chunks_written_ = 0;
  std::vector<uint16_t> rows_;  // one chunk, encoded
};

// Reads a base file chunk by chunk. open() checks the header, the file's size against it
// and every token; read_chunk() checks each row's floats. Every error names the file and
// the byte offset (kIo: cannot open or read; kFormat: malformed or truncated).
class KldBaseReader {
 public:
  static Result<KldBaseReader> open(const std::string& path);
  const KldBaseHeader& header() const { return header_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::string& path() const { return path_; }
  // The next chunk's rows, [kld_scored_per_chunk(n_ctx), kld_row_words(n_vocab)]; valid
  // until the next call.
  Result<std::span<const uint16_t>> read_chunk();

 private:
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  KldBaseHeader header_;
  std::vector<int32_t> tokens_;
  int64_t chunks_read_ = 0;
  std::vector<uint16_t> rows_;
};

// kUsage naming the base file and the first token where `text_tokens` differs from the
// base file's tokens (or where the text ends before them), with its chunk and position.
Result<void> check_kld_tokens(const std::string& base_path, const KldBaseHeader& header,
                              std::span<const int32_t> base_tokens,
                              std::span<const int32_t> text_tokens);

}  // namespace qrun
