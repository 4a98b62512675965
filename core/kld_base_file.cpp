// KldBaseWriter / KldBaseReader: the base file is written and read with stdio, one chunk of
// rows at a time, so its size is bounded by a chunk (n_ctx / 2 rows), not by the text.
// The reader never trusts a count: the header's sizes are checked for overflow and against
// the file's size before anything is allocated.
#include "core/kld_base_file.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

namespace qrun {

static_assert(std::endian::native == std::endian::little,
              "the base file is little-endian, as llama.cpp writes it on these hosts");

namespace {

// Largest n_ctx, n_vocab and n_chunk a header may hold: far beyond real use, small enough
// that every size below fits in 64 bits.
constexpr int64_t kMaxDimension = int64_t{1} << 26;

float load_float(const uint16_t* words) {
  float f;
  std::memcpy(&f, words, sizeof f);
  return f;
}

void store_float(uint16_t* words, float f) {
  std::memcpy(words, &f, sizeof f);
}

int64_t tokens_bytes(const KldBaseHeader& h) {
  return h.n_chunk * h.n_ctx * static_cast<int64_t>(sizeof(int32_t));
}
int64_t chunk_bytes(const KldBaseHeader& h) {
  return kld_scored_per_chunk(h.n_ctx) * kld_row_words(h.n_vocab) *
         static_cast<int64_t>(sizeof(uint16_t));
}

Error io_error(const std::string& path, const char* what) {
  return make_error(ErrorCode::kIo,
                    format("%s: cannot %s: %s", path.c_str(), what, std::strerror(errno)));
}

}  // namespace

void encode_log_probs(std::span<const float> logits, std::span<uint16_t> row) {
  const auto n_vocab = static_cast<int64_t>(logits.size());
  QRUN_CHECK(n_vocab > 0 && static_cast<int64_t>(row.size()) == kld_row_words(n_vocab),
             "a row of %lld words for %lld logits", static_cast<long long>(row.size()),
             static_cast<long long>(n_vocab));
  // Float arithmetic as llama.cpp does it, so that equal logits give equal bytes.
  const auto [lo, hi] = std::minmax_element(logits.begin(), logits.end());
  const float max_logit = *hi;
  const float min_logit = std::max(*lo, max_logit - 16.0f);  // the clip, see the header
  double sum_exp = 0.0;
  for (float l : logits) sum_exp += std::exp(l - max_logit);
  const auto log_sum_exp = static_cast<float>(std::log(sum_exp));
  const float scale = (max_logit - min_logit) / 65535.0f;
  store_float(row.data(), scale);
  store_float(row.data() + 2, min_logit - max_logit - log_sum_exp);
  uint16_t* q = row.data() + 4;
  std::fill(q, row.data() + row.size(), uint16_t{0});
  if (scale == 0.0f) return;  // a flat row: every log-probability is min_log_prob
  const float inv_scale = 1.0f / scale;
  for (int64_t i = 0; i < n_vocab; ++i) {
    if (logits[static_cast<size_t>(i)] <= min_logit) continue;
    // Round to nearest, ties to even (the default rounding mode).
    const long v = std::lrintf(inv_scale * (logits[static_cast<size_t>(i)] - min_logit));
    q[i] = static_cast<uint16_t>(std::clamp(v, 0L, 65535L));
  }
}

float kld_row_scale(std::span<const uint16_t> row) {
  return load_float(row.data());
}
float kld_row_min_log_prob(std::span<const uint16_t> row) {
  return load_float(row.data() + 2);
}

Result<KldBaseWriter> KldBaseWriter::create(const std::string& path, int64_t n_ctx, int64_t n_vocab,
                                            std::span<const int32_t> tokens) {
  QRUN_CHECK(n_ctx >= 2 && n_ctx <= kMaxDimension && n_vocab > 0 && n_vocab <= kMaxDimension,
             "n_ctx %lld, n_vocab %lld", static_cast<long long>(n_ctx),
             static_cast<long long>(n_vocab));
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  QRUN_CHECK(n_tokens >= n_ctx && n_tokens % n_ctx == 0, "%lld tokens in chunks of %lld",
             static_cast<long long>(n_tokens), static_cast<long long>(n_ctx));
  KldBaseWriter w;
  w.path_ = path;
  w.header_ = {n_ctx, n_vocab, n_tokens / n_ctx};
  Result<ReplacingFile> file = ReplacingFile::create(path);
  if (!file) return file.error();
  w.file_.emplace(std::move(*file));
  const int32_t dims[3] = {static_cast<int32_t>(n_ctx), static_cast<int32_t>(n_vocab),
                           static_cast<int32_t>(w.header_.n_chunk)};
  std::FILE* f = w.file_->get();
  if (std::fwrite(kKldMagic, 1, sizeof kKldMagic, f) != sizeof kKldMagic ||
      std::fwrite(dims, sizeof dims[0], 3, f) != 3 ||
      std::fwrite(tokens.data(), sizeof(int32_t), tokens.size(), f) != tokens.size()) {
    return io_error(path, "write");
  }
  w.rows_.resize(static_cast<size_t>(kld_scored_per_chunk(n_ctx) * kld_row_words(n_vocab)));
  return w;
}

Result<void> KldBaseWriter::append_chunk(std::span<const float> scored_logits) {
  const int64_t n_rows = kld_scored_per_chunk(header_.n_ctx);
  const int64_t n_vocab = header_.n_vocab;
  const int64_t words = kld_row_words(n_vocab);
  QRUN_CHECK(static_cast<int64_t>(scored_logits.size()) == n_rows * n_vocab,
             "%zu logits for %lld rows of %lld", scored_logits.size(),
             static_cast<long long>(n_rows), static_cast<long long>(n_vocab));
  QRUN_CHECK(chunks_written_ < header_.n_chunk, "chunk %lld of %lld",
             static_cast<long long>(chunks_written_), static_cast<long long>(header_.n_chunk));
  for (int64_t r = 0; r < n_rows; ++r) {
    encode_log_probs(
        scored_logits.subspan(static_cast<size_t>(r * n_vocab), static_cast<size_t>(n_vocab)),
        std::span<uint16_t>(rows_).subspan(static_cast<size_t>(r * words),
                                           static_cast<size_t>(words)));
  }
  if (std::fwrite(rows_.data(), sizeof(uint16_t), rows_.size(), file_->get()) != rows_.size()) {
    return io_error(path_, "write");
  }
  ++chunks_written_;
  return {};
}

Result<void> KldBaseWriter::finish() {
  QRUN_CHECK(chunks_written_ == header_.n_chunk, "%lld of %lld chunks written",
             static_cast<long long>(chunks_written_), static_cast<long long>(header_.n_chunk));
  return file_->commit();
}

Result<KldBaseReader> KldBaseReader::open(const std::string& path) {
  KldBaseReader rd;
  rd.path_ = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return make_error(ErrorCode::kIo,
                      format("%s: is a directory, not a KL-divergence base file", path.c_str()));
  }
  rd.file_.reset(std::fopen(path.c_str(), "rb"));
  if (!rd.file_) return io_error(path, "open the KL-divergence base file");
  const auto size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  if (ec) return make_error(ErrorCode::kIo, format("%s: %s", path.c_str(), ec.message().c_str()));
  const auto bad = [&](int64_t offset, const std::string& what) {
    return make_error(ErrorCode::kFormat, format("%s: offset %lld: %s", path.c_str(),
                                                 static_cast<long long>(offset), what.c_str()));
  };

  char magic[sizeof kKldMagic] = {};
  int32_t dims[3] = {};
  if (size < kKldHeaderBytes) {
    return bad(size, format("truncated: %lld bytes, shorter than the %lld-byte header",
                            static_cast<long long>(size), static_cast<long long>(kKldHeaderBytes)));
  }
  if (std::fread(magic, 1, sizeof magic, rd.file_.get()) != sizeof magic ||
      std::fread(dims, sizeof dims[0], 3, rd.file_.get()) != 3) {
    return io_error(path, "read");
  }
  if (std::memcmp(magic, kKldMagic, sizeof magic) != 0) {
    return bad(0, "not a KL-divergence base file (no \"_logits_\" magic)");
  }
  const char* names[3] = {"n_ctx", "n_vocab", "n_chunk"};
  const int32_t lows[3] = {2, 1, 1};
  for (int i = 0; i < 3; ++i) {
    if (dims[i] < lows[i] || dims[i] > kMaxDimension) {
      return bad(8 + 4 * i, format("%s is %d, outside [%d, %lld]", names[i], dims[i], lows[i],
                                   static_cast<long long>(kMaxDimension)));
    }
  }
  KldBaseHeader& h = rd.header_;
  h = {dims[0], dims[1], dims[2]};

  // Sizes: every factor is at most 2^26, so each product below fits in 64 bits.
  const int64_t data_start = kKldHeaderBytes + tokens_bytes(h);
  const int64_t per_chunk = chunk_bytes(h);
  const int64_t want = data_start + h.n_chunk * per_chunk;
  if (size < data_start) {
    return bad(
        size, format("truncated in the tokens: %lld tokens (n_chunk %lld * n_ctx %lld) "
                     "end at offset %lld",
                     static_cast<long long>(h.n_chunk * h.n_ctx), static_cast<long long>(h.n_chunk),
                     static_cast<long long>(h.n_ctx), static_cast<long long>(data_start)));
  }
  if (size < want) {
    const int64_t chunk = (size - data_start) / per_chunk;
    return bad(size, format("truncated in chunk %lld of %lld, which ends at offset %lld",
                            static_cast<long long>(chunk + 1), static_cast<long long>(h.n_chunk),
                            static_cast<long long>(data_start + (chunk + 1) * per_chunk)));
  }
  if (size > want) {
    return bad(want,
               format("%lld bytes after the last of %lld chunks",
                      static_cast<long long>(size - want), static_cast<long long>(h.n_chunk)));
  }

  rd.tokens_.resize(static_cast<size_t>(h.n_chunk * h.n_ctx));
  if (std::fread(rd.tokens_.data(), sizeof(int32_t), rd.tokens_.size(), rd.file_.get()) !=
      rd.tokens_.size()) {
    return io_error(path, "read");
  }
  for (size_t i = 0; i < rd.tokens_.size(); ++i) {
    if (rd.tokens_[i] < 0 || rd.tokens_[i] >= h.n_vocab) {
      return bad(kKldHeaderBytes + static_cast<int64_t>(i * sizeof(int32_t)),
                 format("token %zu is %d, outside the vocabulary of %lld", i, rd.tokens_[i],
                        static_cast<long long>(h.n_vocab)));
    }
  }
  rd.rows_.resize(static_cast<size_t>(per_chunk) / sizeof(uint16_t));
  return rd;
}

Result<std::span<const uint16_t>> KldBaseReader::read_chunk() {
  const KldBaseHeader& h = header_;
  QRUN_CHECK(chunks_read_ < h.n_chunk, "chunk %lld of %lld", static_cast<long long>(chunks_read_),
             static_cast<long long>(h.n_chunk));
  const int64_t offset = kKldHeaderBytes + tokens_bytes(h) + chunks_read_ * chunk_bytes(h);
  if (std::fread(rows_.data(), sizeof(uint16_t), rows_.size(), file_.get()) != rows_.size()) {
    return make_error(ErrorCode::kIo, format("%s: offset %lld: cannot read chunk %lld",
                                             path_.c_str(), static_cast<long long>(offset),
                                             static_cast<long long>(chunks_read_ + 1)));
  }
  const int64_t words = kld_row_words(h.n_vocab);
  for (int64_t r = 0; r < kld_scored_per_chunk(h.n_ctx); ++r) {
    const std::span<const uint16_t> row(rows_.data() + r * words, static_cast<size_t>(words));
    const float scale = kld_row_scale(row);
    const float min_log_prob = kld_row_min_log_prob(row);
    // A real row: 0 <= scale <= 16/65535 (with rounding slack), min_log_prob finite, <= 0.
    if (!(scale >= 0.0f && scale < 1e-3f) || !std::isfinite(min_log_prob) || min_log_prob > 1e-3f) {
      return make_error(
          ErrorCode::kFormat,
          format("%s: offset %lld: chunk %lld row %lld has scale %g and min log-probability %g, "
                 "not a row of log-probabilities",
                 path_.c_str(), static_cast<long long>(offset + r * words * 2),
                 static_cast<long long>(chunks_read_ + 1), static_cast<long long>(r),
                 static_cast<double>(scale), static_cast<double>(min_log_prob)));
    }
  }
  ++chunks_read_;
  return std::span<const uint16_t>(rows_);
}

Result<void> check_kld_tokens(const std::string& base_path, const KldBaseHeader& header,
                              std::span<const int32_t> base_tokens,
                              std::span<const int32_t> text_tokens) {
  const size_t n = std::min(base_tokens.size(), text_tokens.size());
  const auto mismatch =
      std::mismatch(base_tokens.begin(), base_tokens.begin() + n, text_tokens.begin());
  const auto i = static_cast<int64_t>(mismatch.first - base_tokens.begin());
  if (static_cast<size_t>(i) == base_tokens.size()) return {};
  const long long chunk = i / header.n_ctx + 1;
  const long long pos = i % header.n_ctx;
  const long long offset = kKldHeaderBytes + i * static_cast<int64_t>(sizeof(int32_t));
  if (static_cast<size_t>(i) == text_tokens.size()) {
    return make_error(ErrorCode::kUsage,
                      format("%s: the text has %zu tokens, the base file %zu: it ends at token "
                             "%lld (chunk %lld, position %lld; offset %lld)",
                             base_path.c_str(), text_tokens.size(), base_tokens.size(),
                             static_cast<long long>(i), chunk, pos, offset));
  }
  return make_error(ErrorCode::kUsage,
                    format("%s: token %lld (chunk %lld, position %lld; offset %lld) is %d in the "
                           "base file but %d in the text: not the same text or tokenizer",
                           base_path.c_str(), static_cast<long long>(i), chunk, pos, offset,
                           *mismatch.first, *mismatch.second));
}

}  // namespace qrun
