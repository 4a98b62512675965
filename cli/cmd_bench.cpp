// `qrun bench`: llama-bench's two measurements on qrun's CPU or CUDA backend (-ngl), with its
// flags, its Markdown table and its JSON field names, so the two tools compare line by line.
//   ppN: N random valid tokens in one forward (chunked by -b), timed to the logits.
//   tgN: N single-token forwards from an empty cache, as in decoding.
//   With -d D (llama-bench's depth), D random tokens are prefilled, untimed, before each
//   run, so the test runs at context depth D ("tg128 @ d4096").
// Each test runs once to warm up (pp: in full; tg: one token, as llama-bench does), then
// -r times with the KV cache cleared before each run; t/s is the mean +- sample stddev of
// the runs. For tg the weights read per token times t/s gives an effective bandwidth,
// compared with the measured read bandwidth of this machine (the roofline of decoding).
// --no-memory-probe skips that measurement (its time, and its work, depend on the host's
// load): the table then has no "% mem" column and says so, the JSON has memory_gbps and
// bandwidth_utilisation null and memory_probe false.
// With a grammar flag (--grammar, --grammar-file, -j, -jf), each tg test also runs twice
// decoding for real: each next token sampled from the logits by the default sampler chain
// (seeded), "tgN sampled" without the grammar and "tgN grammar" with it, so their ratio is
// the grammar's cost. When the grammar completes (or an end token is sampled) it starts
// again from its root and decoding goes on.
// With a drafter (-md/--model-draft FILE or --lookup-ngram N, as `qrun run`), each tg test
// also decodes greedily through generate(): "tgN greedy" without the drafter and "tgN spec"
// with it, from the same prompt (the -d tokens and one more), never stopping at an end
// token; t/s counts the N - 1 tokens after the first, and stderr and the JSON add the
// drafted and accepted tokens and the tokens per target pass.
// With -np S (a comma list, llama-batched-bench's -npl; default 1), each tg test runs once
// per S with S sequences decoded together, as `qrun serve` decodes them: S caches, and every step
// one batched forward pass of one token per sequence ("tgN x S"); t/s counts the tokens of all S
// sequences, and the effective bandwidth is per pass (the weights are read once for all). stdout
// carries only the table or the JSON; progress goes to stderr.
// With -kvu/--kv-unified, every test's caches are sequences of one paged KV pool (blocks of
// --block-size rows), as `qrun serve` keeps them by default: each pass first reserves its
// positions' blocks and attention reads the rows through block tables, so the difference
// from a run without it is what paging costs (the JSON says kv_unified).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "cli/draft_flags.h"
#include "cli/sampling_flags.h"
#include "cli/session.h"
#include "cli/threads.h"
#include "core/kv_block_pool.h"
#include "core/model_info.h"
#include "kernels/cpu/cpu_backend.h"
#if defined(QRUN_HAVE_CUDA)
#include "kernels/cuda/cuda_info.h"
#endif
#include "kernels/cpu/mem_bandwidth.h"

namespace qrun::cli {
namespace {

// Longest -p or -n accepted (the KV cache is sized from them).
constexpr int64_t kMaxBenchTokens = int64_t{1} << 20;

struct BenchOptions {
  ModelFlags model;
  std::vector<int64_t> n_prompt{512};
  std::vector<int64_t> n_gen{128};
  std::vector<int64_t> n_depth{0};
  std::vector<int64_t> n_parallel{1};
  std::vector<int> threads;  // empty: the backend's default
  int repetitions = 5;
  bool json = false;
  bool memory = false;
  bool no_memory_probe = false;  // never measure the read bandwidth (no roofline)
  SamplingFlags grammar;         // only the grammar flags are declared
  DraftFlags draft;              // -md or --lookup-ngram: speculative tg tests too
  bool kv_unified = false;       // the caches are sequences of one paged pool
  int64_t block_size = 32;       // its rows per block
};

// How a tg test chooses its tokens: fixed random ones (llama-bench), or sampled from the
// logits by the default chain, without or with the grammar, or greedy through generate(),
// without or with the drafter.
enum class TgMode { kFixed, kSampled, kGrammar, kGreedy, kSpeculative };

// One row of the report: a test at one thread count, with its timed runs.
struct BenchRecord {
  int64_t n_prompt = 0;
  int64_t n_gen = 0;
  int64_t n_depth = 0;
  int64_t n_parallel = 1;  // sequences decoded together (tg only)
  int n_threads = 0;
  TgMode mode = TgMode::kFixed;
  int64_t grammar_restarts = 0;  // times the grammar completed and started again
  GenerateTimings speculation;   // kGreedy, kSpeculative: the drafts of the timed runs
  std::string test_time;
  std::vector<int64_t> samples_ns;
  const kernels::MemBandwidth* memory = nullptr;  // measured at this thread count, if any
};

// What every record shares: the model file and the backend.
struct BenchContext {
  ModelInfo info;
  std::string model_type;
  std::string backend;  // "cpu" or "cuda"
  std::string isa;      // the CPU kernels (CPU backend only)
  size_t weight_bytes_per_token = 0;
  int64_t n_batch = 0;
  std::string type_k;
  std::string type_v;
  bool kv_unified = false;
};

double mean(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

double sample_stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const double m = mean(v);
  double ss = 0.0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Bytes of weights one decoded token reads: every tensor but the token embedding, one row
// of the embedding, or the whole embedding when the output projection is tied to it; of a
// mixture of experts' expert tensors, the n_expert_used / n_expert a token runs through.
size_t weight_bytes_per_token(const gguf::File& file) {
  const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  const bool tied = file.find_tensor("output.weight") == nullptr;
  size_t bytes = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (&t == embd) continue;
    const TokenShare share = token_share(file, t);
    bytes += t.n_bytes / static_cast<size_t>(share.of) * static_cast<size_t>(share.used);
  }
  if (embd) bytes += tied ? embd->n_bytes : row_size(embd->type, embd->ne[0]);
  return bytes;
}

// "llama 1.10B Q4_0", after llama-bench's "<arch> <size> <file type>".
std::string model_type(const ModelInfo& m) {
  std::string type = m.file_type;
  if (type.empty()) {  // the type holding the most bytes
    size_t most = 0;
    for (const auto& [name, count_bytes] : m.type_histogram) {
      if (count_bytes.second > most) most = count_bytes.second, type = name;
    }
    std::transform(type.begin(), type.end(), type.begin(), ::toupper);
  }
  return (m.architecture.empty() ? "?" : m.architecture) + " " +
         human_count(static_cast<double>(m.n_params)) + " " + type;
}

const char* mode_name(TgMode m) {
  switch (m) {
    case TgMode::kFixed:
      return "";
    case TgMode::kSampled:
      return " sampled";
    case TgMode::kGrammar:
      return " grammar";
    case TgMode::kGreedy:
      return " greedy";
    case TgMode::kSpeculative:
      return " spec";
  }
  return "";
}

bool through_generate(TgMode m) {
  return m == TgMode::kGreedy || m == TgMode::kSpeculative;
}

std::string test_name(const BenchRecord& r) {
  std::string name = r.n_prompt > 0
                         ? format("pp%lld", static_cast<long long>(r.n_prompt))
                         : format("tg%lld%s", static_cast<long long>(r.n_gen), mode_name(r.mode));
  if (r.n_parallel > 1) name += format(" x%lld", static_cast<long long>(r.n_parallel));
  if (r.n_depth > 0) name += format(" @ d%lld", static_cast<long long>(r.n_depth));
  return name;
}

std::vector<double> samples_ts(const BenchRecord& r) {
  // (through generate(), the first token comes with the prompt: N - 1 are timed)
  const double n = static_cast<double>(r.n_prompt + r.n_gen - (through_generate(r.mode) ? 1 : 0)) *
                   static_cast<double>(r.n_parallel);
  std::vector<double> ts;
  for (int64_t ns : r.samples_ns) ts.push_back(n * 1e9 / static_cast<double>(ns));
  return ts;
}

// Random valid tokens; the first is BOS when the model adds one, as in llama-bench.
std::vector<int32_t> bench_tokens(const Session& s, int64_t n, uint32_t seed) {
  const int32_t n_vocab =
      static_cast<int32_t>(std::min<int64_t>(s.tokenizer->n_vocab(), s.model->hparams().n_vocab));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, n_vocab - 1);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int32_t& t : tokens) t = pick(rng);
  if (n > 0 && s.tokenizer->add_bos() && s.tokenizer->is_valid(s.tokenizer->bos()))
    tokens[0] = s.tokenizer->bos();
  return tokens;
}

// Before a pass writes n positions at pos: a paged cache takes the blocks they need, as
// qrun serve's scheduler reserves them before each pass.
Result<void> reserve_if_paged(Session& s, KvCache& kv, int64_t pos, int64_t n) {
  if (!kv.paged()) return {};
  return kv.reserve(pos, n, *s.backend);
}

// One forward pass of `tokens` at `pos`.
Result<void> forward_at(Session& s, std::span<const int32_t> tokens, int64_t pos, KvCache& kv,
                        float* logits) {
  QRUN_TRY(reserve_if_paged(s, kv, pos, static_cast<int64_t>(tokens.size())));
  return s.model->forward(*s.backend, tokens, pos, kv, false, logits);
}

// Clears `kv` and prefills the `depth` tokens into it in batches of n_batch (untimed).
Result<void> prefill_depth(Session& s, KvCache& kv, std::span<const int32_t> depth, int64_t n_batch,
                           std::vector<float>& logits) {
  kv.clear();
  const int64_t n_depth = static_cast<int64_t>(depth.size());
  for (int64_t i = 0; i < n_depth; i += n_batch) {
    const int64_t n = std::min(n_batch, n_depth - i);
    QRUN_TRY(forward_at(s, depth.subspan(static_cast<size_t>(i), static_cast<size_t>(n)), i, kv,
                        logits.data()));
  }
  return {};
}

// One run of a test: the cache cleared, the `depth` tokens prefilled in batches of
// n_batch (untimed), then tokens in one forward (pp) or one by one (tg). With a sampler,
// only the first token is taken from `tokens`; each next one is sampled from the logits
// (the time includes sampling). Returns the nanoseconds the test tokens took.
Result<int64_t> run_once(Session& s, std::span<const int32_t> depth, int64_t n_batch,
                         std::span<const int32_t> tokens, bool one_by_one,
                         std::vector<float>& logits, Sampler* sampler = nullptr,
                         int64_t* restarts = nullptr) {
  if (sampler != nullptr) sampler->reset();
  QRUN_TRY(prefill_depth(s, s.kv, depth, n_batch, logits));
  const int64_t pos0 = static_cast<int64_t>(depth.size());
  const auto t0 = std::chrono::steady_clock::now();
  if (one_by_one) {
    int32_t token = tokens.empty() ? 0 : tokens[0];
    for (size_t i = 0; i < tokens.size(); ++i) {
      QRUN_TRY(forward_at(s, std::span<const int32_t>(&token, 1), pos0 + static_cast<int64_t>(i),
                          s.kv, logits.data()));
      if (sampler == nullptr) {
        if (i + 1 < tokens.size()) token = tokens[i + 1];
        continue;
      }
      token = sampler->sample(logits);
      sampler->accept(token);
      if (sampler->constraint_complete() || s.tokenizer->is_eog(token)) {
        sampler->reset();
        if (restarts != nullptr) ++*restarts;
      }
    }
    if (sampler != nullptr && sampler->constraint() != nullptr && sampler->constraint()->error()) {
      return *sampler->constraint()->error();
    }
  } else {
    QRUN_TRY(forward_at(s, tokens, pos0, s.kv, logits.data()));
  }
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
      .count();
}

// One run of a tg test over caches.size() sequences decoded together: every cache cleared
// and the `depth` tokens prefilled into each (untimed), then tokens.size() steps of one
// batched forward pass with a token per sequence (sequence j takes the tokens from j on).
// Returns the nanoseconds the steps took.
Result<int64_t> run_parallel_once(Session& s, std::vector<KvCache>& caches,
                                  std::span<const int32_t> depth, int64_t n_batch,
                                  std::span<const int32_t> tokens, std::vector<float>& logits) {
  for (KvCache& kv : caches) QRUN_TRY(prefill_depth(s, kv, depth, n_batch, logits));
  const int64_t pos0 = static_cast<int64_t>(depth.size());
  const size_t n_vocab = static_cast<size_t>(s.model->hparams().n_vocab);
  std::vector<SeqForward> parts(caches.size());
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (size_t j = 0; j < parts.size(); ++j) {
      QRUN_TRY(reserve_if_paged(s, caches[j], pos0 + static_cast<int64_t>(i), 1));
      parts[j] = {tokens.subspan((i + j) % tokens.size(), 1), pos0 + static_cast<int64_t>(i),
                  &caches[j], false, logits.data() + j * n_vocab};
    }
    // A step of decode rows only, as the batch scheduler marks it.
    s.backend->set_decode_rows(true);
    Result<void> step = s.model->forward_batch(*s.backend, parts);
    s.backend->set_decode_rows(false);
    QRUN_TRY(step);
  }
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
      .count();
}

// One greedy generation of r.n_gen tokens after the -d tokens and one more, with the
// drafter of `draft` if given; returns the nanoseconds of the tokens after the first.
Result<int64_t> run_generate(Session& s, const BenchRecord& r, int64_t n_batch,
                             const DraftSetup* draft, GenerateTimings& totals) {
  std::vector<int32_t> prompt = bench_tokens(s, r.n_depth, 4321);
  prompt.push_back(bench_tokens(s, 1, 1234)[0]);
  s.kv.clear();
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  Sampler sampler = make_sampler(greedy);
  GenerateParams gp;
  gp.n_predict = r.n_gen;
  gp.n_batch = n_batch;
  if (draft != nullptr) gp.speculative = draft->params;
  Result<GenerateResult> g = generate(
      *s.model, *s.backend, s.kv, prompt, gp, sampler,
      [](int32_t) { return TokenAction::kContinue; }, nullptr);
  if (!g.ok()) return g.error();
  const GenerateTimings& t = g->timings;
  totals.n_gen += t.n_gen;
  totals.n_passes += t.n_passes;
  totals.n_drafted += t.n_drafted;
  totals.n_accepted += t.n_accepted;
  return static_cast<int64_t>(std::llround(t.gen_ms * 1e6));
}

// pool: with --kv-unified, the pool whose sequences the -np caches are (s.kv is one too).
Result<void> run_test(Session& s, const BenchOptions& o, BenchRecord& r,
                      const std::shared_ptr<KvBlockPool>& pool, const DraftSetup* draft) {
  const bool tg = r.n_gen > 0;
  const std::vector<int32_t> tokens = bench_tokens(s, tg ? r.n_gen : r.n_prompt, 1234);
  const std::vector<int32_t> depth = bench_tokens(s, r.n_depth, 4321);
  std::vector<float> logits(static_cast<size_t>(s.model->hparams().n_vocab * r.n_parallel));
  std::vector<KvCache> caches;
  for (int64_t j = 0; r.n_parallel > 1 && j < r.n_parallel; ++j) {
    Result<KvCache> kv = pool != nullptr ? make_paged_kv_cache(*s.model, pool, s.kv.n_ctx())
                                         : make_flagged_kv_cache(*s.model, o.model, s.kv.n_ctx());
    if (!kv.ok()) return kv.error();
    caches.push_back(std::move(*kv));
  }
  std::optional<Sampler> sampler;
  if (r.mode != TgMode::kFixed) {
    SamplingParams params;  // llama.cpp's default chain, a fixed seed
    params.seed = 1234;
    sampler.emplace(make_sampler(params));
    if (r.mode == TgMode::kGrammar)
      QRUN_TRY(attach_grammar(o.grammar, *s.tokenizer, s.grammar_vocab, *sampler));
  }
  Sampler* sp = sampler ? &*sampler : nullptr;
  std::fprintf(stderr, "qrun: bench %s, %d threads: warm-up", test_name(r).c_str(), r.n_threads);
  std::fflush(stderr);
  const DraftSetup* drafter = r.mode == TgMode::kSpeculative ? draft : nullptr;
  // The warm-up: a generate() run in full (the drafter warms up too), else as llama-bench.
  std::span<const int32_t> warm_up(tokens);
  if (tg) warm_up = warm_up.first(1);
  GenerateTimings unused;
  auto once = [&](std::span<const int32_t> test_tokens, GenerateTimings& timings,
                  int64_t* restarts) -> Result<int64_t> {
    if (through_generate(r.mode)) return run_generate(s, r, o.model.batch_size, drafter, timings);
    if (!caches.empty()) {
      return run_parallel_once(s, caches, depth, o.model.batch_size, test_tokens, logits);
    }
    return run_once(s, depth, o.model.batch_size, test_tokens, tg, logits, sp, restarts);
  };
  Result<int64_t> ns = once(warm_up, unused, nullptr);
  if (!ns.ok()) return ns.error();
  r.test_time = utc_now();
  for (int i = 0; i < o.repetitions; ++i) {
    std::fprintf(stderr, ", run %d", i + 1);
    std::fflush(stderr);
    ns = once(tokens, r.speculation, &r.grammar_restarts);
    if (!ns.ok()) return ns.error();
    r.samples_ns.push_back(std::max<int64_t>(1, *ns));
  }
  const std::vector<double> ts = samples_ts(r);
  std::fprintf(stderr, ": %.2f +- %.2f t/s", mean(ts), sample_stddev(ts));
  if (r.mode == TgMode::kSpeculative) {
    std::fprintf(stderr, " (%s)", speculative_summary(r.speculation).c_str());
  }
  if (r.mode == TgMode::kGrammar) {
    std::fprintf(stderr, " (the grammar completed %lld times)",
                 static_cast<long long>(r.grammar_restarts));
  }
  std::fprintf(stderr, "\n");
  return {};
}

// The tg roofline figures; null when they do not apply (pp, or no measured bandwidth).
struct Bandwidth {
  std::optional<double> effective_gbps;
  std::optional<double> utilisation;
};

Bandwidth bandwidth_of(const BenchContext& c, const BenchRecord& r) {
  Bandwidth b;
  if (r.n_gen <= 0) return b;
  // Per batched pass: the weights are read once for all r.n_parallel tokens.
  b.effective_gbps = static_cast<double>(c.weight_bytes_per_token) * mean(samples_ts(r)) /
                     static_cast<double>(r.n_parallel) / 1e9;
  if (r.memory && r.memory->gbps > 0) b.utilisation = *b.effective_gbps / r.memory->gbps;
  return b;
}

template <class T>
nlohmann::json or_null(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::ordered_json record_json(const BenchContext& c, const BenchRecord& r) {
  const std::vector<double> ts = samples_ts(r);
  std::vector<double> ns(r.samples_ns.begin(), r.samples_ns.end());
  const Bandwidth b = bandwidth_of(c, r);
  nlohmann::ordered_json j;
  j["model_filename"] = c.info.path;
  j["model_type"] = c.model_type;
  j["model_size"] = c.info.n_tensor_bytes;
  j["model_n_params"] = c.info.n_params;
  j["n_batch"] = c.n_batch;
  j["n_threads"] = r.n_threads;
  j["type_k"] = c.type_k;
  j["type_v"] = c.type_v;
  j["kv_unified"] = c.kv_unified;
  j["n_prompt"] = r.n_prompt;
  j["n_gen"] = r.n_gen;
  j["tg_tokens"] = r.mode == TgMode::kFixed     ? "fixed"
                   : r.mode == TgMode::kSampled ? "sampled"
                   : r.mode == TgMode::kGrammar ? "sampled with grammar"
                   : r.mode == TgMode::kGreedy  ? "greedy"
                                                : "greedy, speculative";
  if (through_generate(r.mode)) {
    j["n_drafted"] = r.speculation.n_drafted;
    j["n_accepted"] = r.speculation.n_accepted;
    j["tokens_per_pass"] =
        r.speculation.n_passes > 0
            ? static_cast<double>(r.speculation.n_gen) / static_cast<double>(r.speculation.n_passes)
            : 0.0;
  }
  j["n_depth"] = r.n_depth;
  j["n_parallel"] = r.n_parallel;
  j["test_time"] = r.test_time;
  j["avg_ns"] = static_cast<int64_t>(std::llround(mean(ns)));
  j["stddev_ns"] = static_cast<int64_t>(std::llround(sample_stddev(ns)));
  j["avg_ts"] = mean(ts);
  j["stddev_ts"] = sample_stddev(ts);
  j["samples_ns"] = r.samples_ns;
  j["samples_ts"] = ts;
  j["backend"] = c.backend;
  j["isa"] = c.isa;
  j["weight_bytes_per_token"] = c.weight_bytes_per_token;
  j["effective_gbps"] = or_null(b.effective_gbps);
  j["memory_gbps"] = r.memory ? nlohmann::json(r.memory->gbps) : nlohmann::json(nullptr);
  j["bandwidth_utilisation"] = or_null(b.utilisation);
  j["memory_probe"] = r.memory != nullptr;
  return j;
}

// Characters as a terminal shows them: UTF-8 continuation bytes take no column.
size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
  return n;
}

// A Markdown table row; a negative width right-aligns the cell.
void print_row(const std::vector<std::string>& cells, const std::vector<int>& widths) {
  std::string line = "|";
  for (size_t i = 0; i < cells.size(); ++i) {
    const size_t width = static_cast<size_t>(std::abs(widths[i]));
    const size_t w = display_width(cells[i]);
    const std::string pad(w < width ? width - w : 0, ' ');
    line += " " + (widths[i] < 0 ? pad + cells[i] : cells[i] + pad) + " |";
  }
  std::printf("%s\n", line.c_str());
}

void print_markdown(const BenchContext& c, const std::vector<BenchRecord>& records,
                    const std::map<int, kernels::MemBandwidth>& memory, bool probed) {
  // llama-bench's columns, then the tg roofline: effective GB/s and its share of the
  // measured read bandwidth (that column only when the bandwidth was measured).
  int test_width = 8;  // wider for "tg128 grammar"
  for (const BenchRecord& r : records) {
    test_width = std::max(test_width, static_cast<int>(test_name(r).size()));
  }
  std::vector<int> widths = {30, -10, -10, 12, -7, -test_width, -20, -9, -7};
  std::vector<std::string> header = {"model", "size", "params",    "backend", "threads",
                                     "test",  "t/s",  "eff. GB/s", "% mem"};
  if (!probed) {
    widths.pop_back();
    header.pop_back();
  }
  print_row(header, widths);
  std::vector<std::string> rule;
  for (int w : widths) {
    rule.push_back(w < 0 ? std::string(static_cast<size_t>(-w) - 1, '-') + ":"
                         : std::string(static_cast<size_t>(w), '-'));
  }
  print_row(rule, widths);
  for (const BenchRecord& r : records) {
    const std::vector<double> ts = samples_ts(r);
    const Bandwidth b = bandwidth_of(c, r);
    const std::string gbps = b.effective_gbps ? format("%.2f", *b.effective_gbps) : "";
    const std::string share =
        b.utilisation ? format("%.1f", 100.0 * *b.utilisation) : (r.n_gen > 0 ? "-" : "");
    std::vector<std::string> cells = {c.model_type,
                                      human_bytes(static_cast<double>(c.info.n_tensor_bytes)),
                                      human_count(static_cast<double>(c.info.n_params)),
                                      c.backend == "cpu" ? "cpu " + c.isa : c.backend,
                                      std::to_string(r.n_threads),
                                      test_name(r),
                                      format("%.2f ± %.2f", mean(ts), sample_stddev(ts)),
                                      gbps,
                                      share};
    if (!probed) cells.pop_back();
    print_row(cells, widths);
  }
  std::printf("\nqrun %s, %s %s; weights read per token: %s", QRUN_VERSION,
              c.backend == "cpu" ? "cpu kernels" : "backend",
              c.backend == "cpu" ? c.isa.c_str() : c.backend.c_str(),
              human_bytes(static_cast<double>(c.weight_bytes_per_token)).c_str());
  if (!probed) std::printf("; memory bandwidth not measured (--no-memory-probe): no %% mem column");
  for (const auto& [n_threads, m] : memory) {
    if (c.backend != "cpu") {
      std::printf("; GPU memory bandwidth: %.2f GB/s (device copy, read + write)", m.gbps);
      continue;
    }
    std::printf("; memory read bandwidth: %.2f GB/s with %d thread%s", m.gbps, n_threads,
                n_threads == 1 ? "" : "s");
  }
  if (c.kv_unified) std::printf("; KV cache paged (--kv-unified)");
  std::printf("\n");
}

Result<kernels::MemBandwidth> measure_memory(ThreadPool& pool) {
  std::fprintf(stderr, "qrun: bench: measuring memory read bandwidth with %d threads\n",
               pool.n_threads());
  return kernels::measure_read_bandwidth(pool, kernels::MemBandwidthOptions{});
}

// `qrun bench --memory` with no model: the read bandwidth at each thread count.
Result<void> run_memory_only(const BenchOptions& o) {
  std::vector<int> threads = o.threads.empty() ? std::vector<int>{0} : o.threads;
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (int t : threads) {
    ThreadPool pool(capped_threads(t, /*quiet=*/false));
    Result<kernels::MemBandwidth> m = measure_memory(pool);
    if (!m.ok()) return m.error();
    if (o.json) {
      nlohmann::ordered_json j;
      j["n_threads"] = m->n_threads;
      j["memory_gbps"] = m->gbps;
      j["mean_gbps"] = m->mean_gbps;
      j["passes"] = m->passes;
      j["buffer_bytes"] = m->buffer_bytes;
      all.push_back(j);
    } else {
      std::printf("memory read bandwidth: %.2f GB/s with %d threads (best of %d passes over %s)\n",
                  m->gbps, m->n_threads, m->passes,
                  human_bytes(static_cast<double>(m->buffer_bytes)).c_str());
    }
  }
  if (o.json) std::printf("%s\n", all.dump(2).c_str());
  return {};
}

Result<void> run_bench(BenchOptions o) {
  int64_t max_p = 0, max_n = 0, max_d = 0;
  for (int64_t p : o.n_prompt) max_p = std::max(max_p, p);
  for (int64_t n : o.n_gen) max_n = std::max(max_n, n);
  if (o.grammar.error) return *o.grammar.error;
  if (o.kv_unified && o.draft.enabled()) {  // generate() decodes into a contiguous cache only
    return make_error(ErrorCode::kUsage, "--kv-unified: not with -md/--lookup-ngram");
  }
  if ((o.block_size & (o.block_size - 1)) != 0) {
    return make_error(ErrorCode::kUsage, format("--block-size %lld: not a power of two",
                                                static_cast<long long>(o.block_size)));
  }
  for (int64_t d : o.n_depth) max_d = std::max(max_d, d);
  for (int64_t np : o.n_parallel) o.model.n_seq = std::max(o.model.n_seq, np);
  if (o.model.model.empty() && o.memory) return run_memory_only(o);
  if (max_p == 0 && max_n == 0 && !o.memory) {
    return make_error(ErrorCode::kUsage, "bench: nothing to measure: every -p and -n is 0");
  }
  // llama-bench sizes the context of a test as n_depth + n_prompt + n_gen; one cache serves
  // all (and with a drafter, room for its last draft: generate() stops drafting at the
  // context end, so the last rounds would otherwise run shorter than in a real run).
  const int64_t draft_room = o.draft.enabled() ? o.draft.draft_max : 0;
  const int64_t needed = std::max<int64_t>(1, max_d + max_p + max_n + draft_room);
  if (o.model.ctx_size <= 0) {
    o.model.ctx_size = needed;
  } else if (o.model.ctx_size < needed) {
    return make_error(
        ErrorCode::kContextOverflow,
        format("bench: -d %lld + -p %lld + -n %lld need a context of %lld tokens but -c is "
               "%lld; raise -c or lower -d/-p/-n",
               static_cast<long long>(max_d), static_cast<long long>(max_p),
               static_cast<long long>(max_n), static_cast<long long>(needed),
               static_cast<long long>(o.model.ctx_size)));
  }

  Result<std::unique_ptr<Session>> session = open_session(o.model, /*log=*/true);
  if (!session.ok()) return session.error();
  Session& s = **session;
  // The CPU backend is remade per -t; the CUDA backend (-ngl) runs every test as it is.
  const auto* first_cpu = dynamic_cast<const kernels::CpuBackend*>(s.backend.get());
  const kernels::Isa isa = first_cpu != nullptr ? first_cpu->isa() : kernels::Isa::kGeneric;

  BenchContext c;
  c.info = describe_model(s.file);
  c.model_type = model_type(c.info);
  c.backend = first_cpu != nullptr ? "cpu" : "cuda";
  c.isa = first_cpu != nullptr ? kernels::isa_name(isa) : "";
  c.weight_bytes_per_token = weight_bytes_per_token(s.file);
  c.n_batch = o.model.batch_size;
  const KvTypes kv_types_chosen = kv_types(o.model);
  c.type_k = dtype_name(kv_types_chosen.k);
  c.type_v = dtype_name(kv_types_chosen.v);
  c.kv_unified = o.kv_unified;
  // --kv-unified: one pool with room for every cache a test holds at once (s.kv and the -np
  // caches), each up to the context; s.kv becomes its first sequence.
  std::shared_ptr<KvBlockPool> pool;
  if (o.kv_unified) {
    if (!s.backend->supports_paged_kv()) {
      return make_error(ErrorCode::kUsage,
                        format("--kv-unified needs a backend that reads paged KV views, and the "
                               "%s backend does not",
                               std::string(s.backend->name()).c_str()));
    }
    const int64_t n_ctx = s.kv.n_ctx();
    const int64_t blocks_per_seq = (n_ctx + o.block_size - 1) / o.block_size;
    { KvCache contiguous = std::move(s.kv); }  // freed before the pool takes its memory
    Result<std::shared_ptr<KvBlockPool>> made = make_kv_block_pool(
        *s.model, blocks_per_seq * (o.model.n_seq + 1), o.block_size, kv_types_chosen);
    if (!made.ok()) return made.error();
    pool = std::move(*made);
    Result<KvCache> kv = make_paged_kv_cache(*s.model, pool, n_ctx);
    if (!kv.ok()) return kv.error();
    s.kv = std::move(*kv);
  }

  std::vector<BenchRecord> records;
  std::map<int, kernels::MemBandwidth> memory;
  const std::vector<int> threads =
      o.threads.empty() || first_cpu == nullptr ? std::vector<int>{0} : o.threads;
  for (int requested : threads) {
    auto* cpu = dynamic_cast<kernels::CpuBackend*>(s.backend.get());
    const int t = cpu != nullptr ? capped_threads(requested, /*quiet=*/false) : 0;
    if (t > 0 && t != cpu->n_threads()) {
      s.backend = std::make_unique<kernels::CpuBackend>(t, isa);
      cpu = static_cast<kernels::CpuBackend*>(s.backend.get());
    }
    const int n_threads = cpu != nullptr ? cpu->n_threads() : 0;
    // The drafter, opened for each thread count: a draft model runs on as many threads as
    // the target (its backend is its session's, which a drafter holds by reference).
    std::optional<DraftSetup> draft;
    if (o.draft.enabled()) {
      SamplingParams greedy;
      greedy.temperature = 0.0f;
      ModelFlags draft_flags = o.model;
      draft_flags.threads = n_threads;
      Result<DraftSetup> d = open_drafter(o.draft, draft_flags, s, greedy, records.empty());
      if (!d.ok()) return d.error();
      draft.emplace(std::move(*d));
    }
    const bool probe = !o.no_memory_probe && (o.memory || max_n > 0);
#if defined(QRUN_HAVE_CUDA)
    if (cpu == nullptr && probe && !memory.count(n_threads)) {
      kernels::MemBandwidth m;
      m.gbps = m.mean_gbps = kernels::cuda::device_copy_gbps();
      m.passes = 10;
      m.buffer_bytes = size_t{1} << 30;
      std::fprintf(stderr, "qrun: bench: GPU memory %.2f GB/s (device copy, read + write)\n",
                   m.gbps);
      if (m.gbps > 0.0) memory.emplace(n_threads, m);
    }
#endif
    if (cpu != nullptr && probe && !memory.count(n_threads)) {
      Result<kernels::MemBandwidth> m = measure_memory(cpu->pool());
      if (!m.ok()) return m.error();
      std::fprintf(stderr, "qrun: bench: memory read %.2f GB/s (best of %d passes over %s)\n",
                   m->gbps, m->passes, human_bytes(static_cast<double>(m->buffer_bytes)).c_str());
      memory.emplace(n_threads, *m);
    }
    auto add_test = [&](int64_t p, int64_t n, int64_t d, TgMode mode = TgMode::kFixed,
                        int64_t n_parallel = 1) -> Result<void> {
      BenchRecord r;
      r.n_prompt = p;
      r.n_gen = n;
      r.n_depth = d;
      r.n_parallel = n_parallel;
      r.n_threads = n_threads;
      r.mode = mode;
      QRUN_TRY(run_test(s, o, r, pool, draft ? &*draft : nullptr));
      records.push_back(std::move(r));
      return {};
    };
    for (int64_t d : o.n_depth) {
      for (int64_t p : o.n_prompt) {
        if (p > 0) QRUN_TRY(add_test(p, 0, d));
      }
      for (int64_t n : o.n_gen) {
        if (n <= 0) continue;
        for (int64_t np : o.n_parallel) QRUN_TRY(add_test(0, n, d, TgMode::kFixed, np));
        if (o.grammar.grammar != nullptr) {
          QRUN_TRY(add_test(0, n, d, TgMode::kSampled));
          QRUN_TRY(add_test(0, n, d, TgMode::kGrammar));
        }
        if (draft && n >= 2) {
          QRUN_TRY(add_test(0, n, d, TgMode::kGreedy));
          QRUN_TRY(add_test(0, n, d, TgMode::kSpeculative));
        }
      }
    }
  }
  for (BenchRecord& r : records) {
    auto it = memory.find(r.n_threads);
    r.memory = it == memory.end() ? nullptr : &it->second;
  }

  if (o.json) {
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    for (const BenchRecord& r : records) all.push_back(record_json(c, r));
    std::printf("%s\n", all.dump(2).c_str());
  } else {
    print_markdown(c, records, memory, !o.no_memory_probe);
  }
  return {};
}

}  // namespace

void register_bench(CLI::App& app, Action* selected) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prompt and generation speed (llama-bench)");
  add_model_flags(cmd, o->model);
  // -t takes a list here, as in llama-bench.
  cmd->remove_option(cmd->get_option("--threads"));
  add_threads_option(cmd, o->threads, "CPU threads, a comma list (default: one per physical core)");
  cmd->add_option("-p,--n-prompt", o->n_prompt, "Prompt lengths, a comma list (0: no pp test)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, kMaxBenchTokens));
  cmd->add_option("-n,--n-gen", o->n_gen, "Generated lengths, a comma list (0: no tg test)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, kMaxBenchTokens));
  cmd->add_option("-d,--n-depth", o->n_depth,
                  "Context depths, a comma list: tokens prefilled (untimed) before each run")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, kMaxBenchTokens));
  cmd->add_option("--parallel", o->n_parallel,
                  "Sequences decoded together in tg tests, a comma list (llama-batched-bench's "
                  "-npl; 'tgN xS')")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{256}));
  cmd->add_flag("--kv-unified", o->kv_unified,
                "The caches are sequences of one paged KV pool, as qrun serve keeps them "
                "(blocks reserved before each pass, read through block tables)");
  cmd->add_option("--block-size", o->block_size, "Tokens per KV block with --kv-unified")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{16}, int64_t{4096}));
  cmd->add_option("-r,--repetitions", o->repetitions, "Timed runs per test, after one warm-up")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--json", o->json, "Print a JSON array of records (llama-bench's field names)");
  add_grammar_flags(cmd, o->grammar);
  add_draft_flags(cmd, o->draft);
  CLI::Option* memory = cmd->add_flag(
      "--memory", o->memory, "Measure the memory read bandwidth (alone: without -m, only that)");
  cmd->add_flag("--no-memory-probe", o->no_memory_probe,
                "Do not measure the memory read bandwidth before tg tests: no '% mem' column, "
                "memory_gbps null (for runs that must not depend on the host's load)")
      ->excludes(memory);
  cmd->footer(
      "-c defaults to max(-d) + max(-p) + max(-n). tg tests measure the memory read bandwidth "
      "(about a\n"
      "second) and report weights read per token x t/s and its share of that bandwidth;\n"
      "--no-memory-probe skips the measurement and leaves the share out.\n"
      "With -np S > 1, each tg test also decodes S sequences together, one batched pass\n"
      "per step as qrun serve does ('tgN xS'; t/s counts every sequence's tokens).\n"
      "With a grammar flag, each tg test also runs sampled (the default chain, seed 1234)\n"
      "without and with the grammar: 'tgN sampled' and 'tgN grammar'.\n"
      "With -md/--model-draft or --lookup-ngram, each tg test also decodes greedily without\n"
      "and with the drafter: 'tgN greedy' and 'tgN spec' (N - 1 tokens timed; stderr and\n"
      "--json add drafted and accepted tokens and tokens per target pass).\n"
      "Exit codes: 0 ok, 2 usage, 3 I/O, 4 malformed file, 5 unsupported model, 6 context "
      "overflow.");
  cmd->callback([o, selected] { *selected = [o] { return run_bench(*o); }; });
}

}  // namespace qrun::cli
