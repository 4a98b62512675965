// Prompt cache files: writing through a temporary file, and a bounded reader that checks
// every header field and the file's size against them before it reads any row, and the
// checksum after, clearing the cache again when it does not match.
#include "core/prompt_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/gguf/replacing_file.h"

namespace qrun {
namespace {

constexpr uint64_t kPrime = 0x9e3779b97f4a7c15ULL;
constexpr int64_t kMaxLayers = 1 << 16;
constexpr int64_t kMaxRowElems = int64_t{1} << 24;
constexpr int64_t kMaxTokens = int64_t{1} << 31;

uint64_t rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

uint64_t load_u64(const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

struct LayerRange {
  int64_t window = 0;
  int64_t first = 0;
};

// Writes and checksums.
class Out {
 public:
  explicit Out(std::FILE* f) : f_(f) {}
  void put(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    sum_.update({b, n});
    ok_ = ok_ && std::fwrite(b, 1, n, f_) == n;
  }
  template <typename T>
  void put_value(T v) {
    put(&v, sizeof v);
  }
  bool finish() {
    const uint64_t digest = sum_.digest();
    ok_ = ok_ && std::fwrite(&digest, 1, sizeof digest, f_) == sizeof digest;
    return ok_;
  }

 private:
  std::FILE* f_;
  PromptCacheChecksum sum_;
  bool ok_ = true;
};

// Reads and checksums; a short read is remembered (the size was checked first, so it means
// the file changed or an I/O error).
class In {
 public:
  explicit In(std::FILE* f) : f_(f) {}
  bool get(void* p, size_t n) {
    auto* b = static_cast<uint8_t*>(p);
    ok_ = ok_ && std::fread(b, 1, n, f_) == n;
    if (ok_) sum_.update({b, n});
    return ok_;
  }
  template <typename T>
  T value() {
    T v{};
    get(&v, sizeof v);
    return v;
  }
  bool ok() const { return ok_; }
  uint64_t digest() const { return sum_.digest(); }

 private:
  std::FILE* f_;
  PromptCacheChecksum sum_;
  bool ok_ = true;
};

// The bytes a file with this header must have, or -1 when the sizes overflow.
int64_t expected_size(int64_t n_layer, int64_t n_tokens, const std::vector<LayerRange>& layers,
                      size_t k_row_bytes, size_t v_row_bytes) {
  double total = static_cast<double>(kPromptCacheHeaderBytes) + 16.0 * n_layer + 4.0 * n_tokens;
  for (const LayerRange& l : layers) {
    total +=
        static_cast<double>(n_tokens - l.first) * static_cast<double>(k_row_bytes + v_row_bytes);
  }
  total += 8.0;
  if (total > 9.0e18) return -1;
  int64_t bytes = kPromptCacheHeaderBytes + 16 * n_layer + 4 * n_tokens + 8;
  for (const LayerRange& l : layers) {
    bytes += (n_tokens - l.first) * static_cast<int64_t>(k_row_bytes + v_row_bytes);
  }
  return bytes;
}

}  // namespace

void PromptCacheChecksum::block(const uint8_t* p) {
  for (int i = 0; i < 4; ++i) {
    lanes_[i] = rotl((lanes_[i] ^ load_u64(p + 8 * i)) * kPrime, 31);
  }
}

void PromptCacheChecksum::update(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return;
  n_total_ += bytes.size();
  size_t i = 0;
  if (n_pending_ > 0) {
    const size_t take = std::min(bytes.size(), sizeof pending_ - n_pending_);
    std::memcpy(pending_ + n_pending_, bytes.data(), take);
    n_pending_ += take;
    i = take;
    if (n_pending_ < sizeof pending_) return;
    block(pending_);
    n_pending_ = 0;
  }
  for (; i + sizeof pending_ <= bytes.size(); i += sizeof pending_) block(bytes.data() + i);
  std::memcpy(pending_, bytes.data() + i, bytes.size() - i);
  n_pending_ = bytes.size() - i;
}

uint64_t PromptCacheChecksum::digest() const {
  uint8_t tail[32] = {};
  std::memcpy(tail, pending_, n_pending_);
  uint64_t h = n_total_ * kPrime;
  for (int i = 0; i < 4; ++i) {
    const uint64_t lane = rotl((lanes_[i] ^ load_u64(tail + 8 * i)) * kPrime, 31);
    h = rotl((h ^ lane) * kPrime, 27);
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

uint64_t prompt_cache_fingerprint(std::span<const uint8_t> gguf_header) {
  PromptCacheChecksum sum;
  sum.update(gguf_header);
  return sum.digest();
}

Result<void> save_prompt_cache(const std::string& path, uint64_t fingerprint, const KvCache& kv,
                               std::span<const int32_t> tokens) {
  const int64_t n = kv.n_tokens();
  QRUN_CHECK(static_cast<int64_t>(tokens.size()) == n, "prompt cache: %zu tokens for %lld cached",
             tokens.size(), static_cast<long long>(n));
  Result<ReplacingFile> file = ReplacingFile::create(path);
  if (!file) return file.error();
  std::setvbuf(file->get(), nullptr, _IOFBF, size_t{1} << 20);
  Out out(file->get());
  out.put(kPromptCacheMagic, sizeof kPromptCacheMagic);
  out.put_value<uint32_t>(kPromptCacheVersion);
  out.put_value<uint32_t>(static_cast<uint32_t>(kv.k_type()));
  out.put_value<uint32_t>(static_cast<uint32_t>(kv.v_type()));
  out.put_value<uint32_t>(0);
  out.put_value<uint64_t>(fingerprint);
  for (const int64_t v : {kv.n_layer(), kv.n_head_kv(), kv.head_dim(), n})
    out.put_value<int64_t>(v);
  std::vector<int64_t> first(static_cast<size_t>(kv.n_layer()));
  for (int64_t il = 0; il < kv.n_layer(); ++il) {
    first[static_cast<size_t>(il)] = std::min(kv.first_held(il), n);
    out.put_value<int64_t>(kv.layer_window(il));
    out.put_value<int64_t>(first[static_cast<size_t>(il)]);
  }
  out.put(tokens.data(), tokens.size_bytes());
  for (int64_t il = 0; il < kv.n_layer(); ++il) {
    for (int64_t p = first[static_cast<size_t>(il)]; p < n; ++p) {
      const std::span<const uint8_t> row = kv.k_row(il, p);
      out.put(row.data(), row.size());
    }
    for (int64_t p = first[static_cast<size_t>(il)]; p < n; ++p) {
      const std::span<const uint8_t> row = kv.v_row(il, p);
      out.put(row.data(), row.size());
    }
  }
  // A failed fwrite is the last call that set errno (Out skips writing after one).
  return file->commit(out.finish() ? 0 : (errno != 0 ? errno : EIO));
}

int64_t prompt_cache_keep(int64_t n_common, int64_t max_keep, int64_t n_prompt, int64_t n_batch) {
  int64_t keep = std::max<int64_t>(0, std::min(n_common, max_keep));
  if (n_batch <= 0 || keep == 0 || keep >= n_prompt) return keep;
  const bool cold_single = (n_prompt - 1) % n_batch == 0;
  while (keep > 0 && ((n_prompt - keep - 1) % n_batch == 0) != cold_single) --keep;
  return keep;
}

PromptCacheLoad load_prompt_cache(const std::string& path, uint64_t fingerprint, KvCache& kv,
                                  std::span<const int32_t> prompt, int64_t max_keep,
                                  int64_t n_batch) {
  QRUN_CHECK(kv.n_tokens() == 0, "prompt cache: loading into a cache of %lld tokens",
             static_cast<long long>(kv.n_tokens()));
  PromptCacheLoad r;
  auto fail = [&](const std::string& why) {
    kv.clear();
    r.n_restored = 0;
    r.problem = path + ": " + why;
    return r;
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      r.found = true;
      return fail(std::strerror(errno));
    }
    r.problem = path + ": does not exist yet";
    return r;
  }
  r.found = true;
  if (!S_ISREG(st.st_mode)) return fail("not a regular file");
  FilePtr file(std::fopen(path.c_str(), "rb"));
  if (!file) return fail(format("cannot open: %s", std::strerror(errno)));
  const auto file_size = static_cast<int64_t>(st.st_size);
  if (file_size < kPromptCacheHeaderBytes) {
    return fail(format("truncated: %lld bytes, shorter than the %lld-byte header",
                       static_cast<long long>(file_size),
                       static_cast<long long>(kPromptCacheHeaderBytes)));
  }
  In in(file.get());
  char magic[8] = {};
  in.get(magic, sizeof magic);
  if (std::memcmp(magic, kPromptCacheMagic, sizeof magic) != 0) {
    return fail("not a qrun prompt cache (bad magic)");
  }
  const auto version = in.value<uint32_t>();
  if (version != kPromptCacheVersion) {
    return fail(format("version %u, this qrun reads version %u", version, kPromptCacheVersion));
  }
  const auto k_type = in.value<uint32_t>();
  const auto v_type = in.value<uint32_t>();
  in.value<uint32_t>();
  const auto file_fingerprint = in.value<uint64_t>();
  const auto n_layer = in.value<int64_t>();
  const auto n_head_kv = in.value<int64_t>();
  const auto head_dim = in.value<int64_t>();
  const auto n_tokens = in.value<int64_t>();
  if (!in.ok()) return fail("cannot read the header");
  if (file_fingerprint != fingerprint) return fail("saved for another model");
  if (k_type != static_cast<uint32_t>(kv.k_type()) ||
      v_type != static_cast<uint32_t>(kv.v_type())) {
    const TypeTraits* k = find_type(k_type);
    const TypeTraits* v = find_type(v_type);
    return fail(format("saved with cache types K %s, V %s; this run uses K %s, V %s",
                       k != nullptr ? k->name : "?", v != nullptr ? v->name : "?",
                       dtype_name(kv.k_type()), dtype_name(kv.v_type())));
  }
  if (n_layer != kv.n_layer() || n_head_kv != kv.n_head_kv() || head_dim != kv.head_dim()) {
    return fail(
        format("saved for %lld layers of %lld KV heads of %lld; this cache has %lld of "
               "%lld of %lld",
               static_cast<long long>(n_layer), static_cast<long long>(n_head_kv),
               static_cast<long long>(head_dim), static_cast<long long>(kv.n_layer()),
               static_cast<long long>(kv.n_head_kv()), static_cast<long long>(kv.head_dim())));
  }
  if (n_layer <= 0 || n_layer > kMaxLayers || n_head_kv * head_dim > kMaxRowElems || n_tokens < 0 ||
      n_tokens > kMaxTokens) {
    return fail(format("implausible sizes (%lld layers, %lld tokens)",
                       static_cast<long long>(n_layer), static_cast<long long>(n_tokens)));
  }
  if (file_size < kPromptCacheHeaderBytes + 16 * n_layer) {
    return fail(format("truncated: %lld bytes, shorter than its layer table",
                       static_cast<long long>(file_size)));
  }
  std::vector<LayerRange> layers(static_cast<size_t>(n_layer));
  for (int64_t il = 0; il < n_layer; ++il) {
    LayerRange& l = layers[static_cast<size_t>(il)];
    l.window = in.value<int64_t>();
    l.first = in.value<int64_t>();
    if (l.window != kv.layer_window(il)) {
      return fail(format("layer %lld has a window of %lld, this model's has %lld",
                         static_cast<long long>(il), static_cast<long long>(l.window),
                         static_cast<long long>(kv.layer_window(il))));
    }
    if (l.first < 0 || l.first > n_tokens || (l.window == 0 && l.first != 0)) {
      return fail(format("layer %lld starts at position %lld of %lld", static_cast<long long>(il),
                         static_cast<long long>(l.first), static_cast<long long>(n_tokens)));
    }
  }
  const int64_t expected =
      expected_size(n_layer, n_tokens, layers, kv.k_row_bytes(), kv.v_row_bytes());
  if (expected != file_size) {
    return fail(format("%lld bytes, but its header describes %lld (truncated or corrupt)",
                       static_cast<long long>(file_size), static_cast<long long>(expected)));
  }
  r.tokens.resize(static_cast<size_t>(n_tokens));
  in.get(r.tokens.data(), r.tokens.size() * sizeof(int32_t));
  if (!in.ok()) return fail("cannot read its tokens");

  // What to keep: the common prefix, as far as every windowed layer still holds what the
  // next token reads.
  r.n_common = 0;
  const auto n_max = std::min<int64_t>(n_tokens, static_cast<int64_t>(prompt.size()));
  while (r.n_common < n_max &&
         r.tokens[static_cast<size_t>(r.n_common)] == prompt[static_cast<size_t>(r.n_common)]) {
    ++r.n_common;
  }
  int64_t keep = prompt_cache_keep(r.n_common, std::min(max_keep, kv.n_ctx()),
                                   static_cast<int64_t>(prompt.size()), n_batch);
  int64_t floor = 0;
  for (const LayerRange& l : layers) {
    if (l.window > 0 && keep > 0 && std::max<int64_t>(0, keep - l.window + 1) < l.first) {
      r.problem = format("%s: its sliding-window layers no longer hold what position %lld reads",
                         path.c_str(), static_cast<long long>(keep));
      keep = 0;
    }
    floor = std::max(floor, l.first);
  }
  floor = std::min(floor, keep);

  // Rows: positions below `keep` go into the cache (windowed layers: only those its ring
  // holds), the rest through a scratch row for the checksum.
  std::vector<uint8_t> scratch(std::max(kv.k_row_bytes(), kv.v_row_bytes()));
  for (int64_t il = 0; il < n_layer && in.ok(); ++il) {
    const LayerRange& l = layers[static_cast<size_t>(il)];
    const int64_t first_kept = std::max(l.first, keep - kv.layer_rows(il));
    for (const bool is_k : {true, false}) {
      for (int64_t p = l.first; p < n_tokens && in.ok(); ++p) {
        std::span<uint8_t> row = is_k ? kv.k_row(il, p) : kv.v_row(il, p);
        if (p < first_kept || p >= keep) row = {scratch.data(), row.size()};
        in.get(row.data(), row.size());
      }
    }
  }
  const uint64_t digest = in.digest();
  const auto stored = in.value<uint64_t>();
  if (!in.ok()) return fail("cannot read its rows");
  if (stored != digest) return fail("checksum mismatch (corrupt)");
  if (keep > 0) kv.restore(keep, floor);
  r.n_restored = keep;
  if (keep > 0) r.problem.clear();
  return r;
}

}  // namespace qrun
