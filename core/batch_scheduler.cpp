// BatchScheduler: the queue under a mutex, everything else on the stepping thread. A step
// builds its forward parts in vectors reserved for every slot and samples into each slot's
// logits row, so a decode step allocates nothing beyond what sampling and the callbacks do
// (paged slots too: a block table has room for a whole context); admitting a request makes
// its sequence state once. Prefix caching allocates when a prompt chunk fills a block (its
// key and tokens) and when a sequence ends or is preempted (its token list).
#include "core/batch_scheduler.h"

#include <algorithm>
#include <optional>
#include <span>
#include <utility>

#include "core/generate_emit.h"
#include "core/kv_block_pool.h"

namespace qrun {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

bool is_set(const std::shared_ptr<const std::atomic<bool>>& flag) {
  return flag != nullptr && flag->load(std::memory_order_relaxed);
}

}  // namespace

// A request that holds a slot (or, parked, waits for KV blocks): its prompt goes in chunks
// (n_fed so far), then it decodes `next` each step. The emitter holds references into this
// object, which never moves.
struct BatchScheduler::Seq {
  Seq(SeqRequest r, uint64_t age_, int64_t n_ctx, const std::atomic<bool>* shutdown)
      : request(std::move(r)),
        age(age_),
        t_start(Clock::now()),
        emitter(params, request.sampler, request.on_token, request.is_eog, result, t_start) {
    params.n_predict = request.n_predict;
    params.interrupt = shutdown;
    if (request.timeout_s > 0) {
      params.deadline = t_start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(request.timeout_s));
    }
    result.timings.n_prompt = static_cast<int64_t>(request.prompt.size());
    // Room for every token it can emit, as generate() makes, so emitting never allocates.
    const int64_t room = n_ctx - result.timings.n_prompt + 1;
    result.tokens.reserve(
        static_cast<size_t>(request.n_predict >= 0 ? std::min(request.n_predict, room) : room));
  }

  SeqRequest request;
  uint64_t age;           // admission order: lower is older
  int slot = -1;          // -1: parked
  KvCache* kv = nullptr;  // its slot's cache, while it holds one
  GenerateParams params;
  GenerateResult result;
  Clock::time_point t_start;
  TokenEmitter emitter;
  bool started = false;      // on_start ran
  bool prompt_done = false;  // its prompt went in and its first token was sampled
  // After a preemption: the prompt and the reply but its pending token, to feed again.
  std::vector<int32_t> recompute;
  std::span<const int32_t> feed() const {
    return prompt_done ? std::span<const int32_t>(recompute) : request.prompt;
  }
  int64_t n_fed = 0;      // prompt tokens in the cache
  bool decoding = false;  // the whole prompt is in; `next` is fed each step
  int32_t next = 0;
  std::vector<float> logits;  // [n_vocab], the row its last part asked for
};

BatchScheduler::BatchScheduler(Model& model, Backend& backend, std::vector<KvCache> slots,
                               int64_t n_batch, int64_t max_queued,
                               const std::atomic<bool>* shutdown, bool prefix_cache)
    : model_(model),
      backend_(backend),
      slots_(std::move(slots)),
      n_batch_(std::max<int64_t>(1, n_batch)),
      max_queued_(max_queued),
      shutdown_(shutdown),
      prefix_cache_(prefix_cache && slots_.front().paged()) {
  QRUN_CHECK(!slots_.empty(), "a batch scheduler needs at least one slot");
  QRUN_CHECK(shutdown_ != nullptr, "a batch scheduler needs a shutdown flag");
  if (paged()) {
    const KvBlockPool& pool = *slots_.front().pool();
    blocks_total_ = pool.n_blocks();
    kv_capacity_ = pool.n_blocks() * pool.block_rows();
    for (const KvCache& kv : slots_) {
      QRUN_CHECK(kv.pool() == slots_.front().pool() && kv.n_tokens() == 0 &&
                     kv.n_ctx() <= pool.n_blocks() * pool.block_rows(),
                 "batch scheduler: paged slots of one pool, empty, each within the pool's %lld "
                 "blocks",
                 static_cast<long long>(pool.n_blocks()));
    }
  } else {
    for (const KvCache& kv : slots_) kv_capacity_ += kv.n_ctx();
  }
  running_.resize(slots_.size());
  parts_.reserve(slots_.size());
  part_seqs_.reserve(slots_.size());
  by_age_.reserve(slots_.size());
}

BatchScheduler::~BatchScheduler() = default;

BatchScheduler::Submitted BatchScheduler::submit(SeqRequest request) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shutdown_->load()) return Submitted::kShuttingDown;
    // A request may wait only behind others or for a busy slot: the queue counts those
    // that no free slot will take at the next step (and those waiting for KV blocks).
    const int64_t free = static_cast<int64_t>(slots_.size()) - n_running_.load();
    const int64_t waiting = static_cast<int64_t>(queue_.size()) + n_parked_.load();
    if (waiting - free >= max_queued_) return Submitted::kQueueFull;
    queue_.push_back(std::move(request));
  }
  wake_.notify_all();
  return Submitted::kQueued;
}

int64_t BatchScheduler::n_queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(queue_.size()) + n_parked_.load();
}

void BatchScheduler::wake() {
  { std::lock_guard<std::mutex> lock(mutex_); }
  wake_.notify_all();
}

void BatchScheduler::finish(Seq& seq, Result<GenerateResult> result, bool timed_out) {
  std::function<void(Result<GenerateResult>, bool)> on_done = std::move(seq.request.on_done);
  if (seq.slot < 0) {  // parked: it holds no slot
    const auto it = std::find_if(parked_.begin(), parked_.end(),
                                 [&](const std::unique_ptr<Seq>& p) { return p.get() == &seq; });
    QRUN_CHECK(it != parked_.end(), "batch scheduler: finishing a sequence it does not hold");
    parked_.erase(it);
    n_parked_.fetch_sub(1);
  } else {
    const auto slot = static_cast<size_t>(seq.slot);
    if (result.ok()) publish(seq, result->tokens);  // (seq.result was moved into it)
    if (seq.kv->paged()) seq.kv->clear();           // its blocks go back to the pool
    running_[slot].reset();                         // the slot is free before the callback runs
    n_running_.fetch_sub(1);
  }
  store_gauges();  // and the gauges say so before anyone hears of the end
  if (on_done) on_done(std::move(result), timed_out);
}

void BatchScheduler::publish(Seq& seq, std::span<const int32_t> generated) {
  if (!prefix_cache_) return;
  if (generated.empty()) return seq.kv->publish(seq.feed());
  // The cache holds the prompt, then the reply but its last token (never fed).
  std::vector<int32_t> tokens = seq.request.prompt;
  tokens.insert(tokens.end(), generated.begin(), generated.end());
  seq.kv->publish(tokens);
}

bool BatchScheduler::place(Seq& seq, size_t slot) {
  KvCache& kv = slots_[slot];
  kv.clear();
  seq.n_fed = 0;
  if (kv.paged()) {
    const std::span<const int32_t> feed = seq.feed();
    const auto n = static_cast<int64_t>(feed.size());
    int64_t cached = prefix_cache_ ? kv.attach_prefix(feed) : 0;
    if (cached > 0 && n - cached < 2) {  // feed two tokens at least (see the header)
      cached -= kv.pool()->block_rows();
      kv.truncate(cached);
    }
    if (kv.blocks_needed(cached, n - cached) > kv.pool()->n_available()) {
      kv.clear();
      return false;
    }
    const Result<void> reserved = kv.reserve(cached, n - cached, backend_);
    QRUN_CHECK(reserved.ok(), "batch scheduler: %s", reserved.error().message.c_str());
    seq.n_fed = cached;
    if (!seq.started) {
      seq.result.timings.n_prompt_cached = cached;
      if (cached > 0) {
        prefix_hits_.fetch_add(1);
        prefix_tokens_.fetch_add(cached);
      }
    }
  }
  seq.slot = static_cast<int>(slot);
  seq.kv = &kv;
  return true;
}

void BatchScheduler::reserve_decode_blocks() {
  by_age_.clear();
  for (const std::unique_ptr<Seq>& s : running_) {
    if (s != nullptr && s->decoding) by_age_.push_back(s.get());
  }
  std::sort(by_age_.begin(), by_age_.end(),
            [](const Seq* a, const Seq* b) { return a->age < b->age; });
  const KvBlockPool& pool = *slots_.front().pool();
  for (Seq* s : by_age_) {
    // Out of blocks: the newest running sequence gives its blocks back (this one last).
    while (s->slot >= 0 && s->kv->blocks_needed(s->kv->n_tokens(), 1) > pool.n_available()) {
      Seq* newest = nullptr;
      for (const std::unique_ptr<Seq>& r : running_) {
        if (r != nullptr && (newest == nullptr || r->age > newest->age)) newest = r.get();
      }
      preempt(*newest);
    }
    if (s->slot < 0) continue;
    const Result<void> reserved = s->kv->reserve(s->kv->n_tokens(), 1, backend_);
    QRUN_CHECK(reserved.ok(), "batch scheduler: %s", reserved.error().message.c_str());
  }
}

void BatchScheduler::preempt(Seq& seq) {
  n_preemptions_.fetch_add(1);
  if (seq.prompt_done) {
    const std::span<const int32_t> fed(seq.result.tokens.data(), seq.result.tokens.size() - 1);
    seq.recompute = seq.request.prompt;
    seq.recompute.insert(seq.recompute.end(), fed.begin(), fed.end());
  }
  publish(seq, seq.result.tokens);
  seq.kv->clear();
  seq.decoding = false;
  seq.n_fed = 0;
  const auto slot = static_cast<size_t>(seq.slot);
  seq.slot = -1;
  seq.kv = nullptr;
  // Back in line by age, so the oldest waiting sequence runs first.
  const auto at = std::find_if(parked_.begin(), parked_.end(),
                               [&](const std::unique_ptr<Seq>& p) { return p->age > seq.age; });
  parked_.insert(at, std::move(running_[slot]));
  n_parked_.fetch_add(1);  // before it leaves the running count: submit() never misses it
  n_running_.fetch_sub(1);
}

void BatchScheduler::store_gauges() {
  int64_t used = 0;
  for (const std::unique_ptr<Seq>& s : running_) {
    if (s != nullptr) used += s->kv->n_tokens();
  }
  kv_used_.store(used);
  if (paged()) {
    blocks_used_.store(slots_.front().pool()->n_used());
    blocks_cached_.store(slots_.front().pool()->n_cached());
  }
}

bool BatchScheduler::step() {
  const bool stopping = shutdown_->load();
  // Queued requests that will not run: all at shutdown, else the cancelled ones.
  std::vector<SeqRequest> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (stopping || is_set(it->cancel)) {
        dropped.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (SeqRequest& r : dropped) {
    GenerateResult none;
    none.stop_reason = StopReason::kInterrupted;
    none.timings.n_prompt = static_cast<int64_t>(r.prompt.size());
    if (r.on_done) r.on_done(std::move(none), false);
  }

  // Sequences that end before this step: cancelled, past their time, shutdown.
  const Clock::time_point now = Clock::now();
  auto ends_now = [&](Seq& s) {
    const bool timed_out = now >= s.params.deadline;
    if (!stopping && !timed_out && !is_set(s.request.cancel)) return false;
    s.result.stop_reason = StopReason::kInterrupted;
    finish(s, std::move(s.result), timed_out && !stopping);
    return true;
  };
  for (std::unique_ptr<Seq>& s : running_) {
    if (s != nullptr) ends_now(*s);
  }
  for (size_t i = 0; i < parked_.size();) {
    if (!ends_now(*parked_[i])) ++i;
  }

  // Free slots take parked sequences, then queued requests, oldest first; one that finds
  // too few KV blocks waits (parked, first in line) and stops admission for this step.
  for (size_t slot = 0; slot < running_.size() && !stopping; ++slot) {
    if (running_[slot] != nullptr) continue;
    std::unique_ptr<Seq> s;
    if (!parked_.empty()) {
      s = std::move(parked_.front());
      parked_.pop_front();
    } else {
      std::optional<SeqRequest> r;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (queue_.empty()) break;
        r.emplace(std::move(queue_.front()));
        queue_.pop_front();
        n_parked_.fetch_add(1);  // with the pop, so submit() never counts it out of line
      }
      const int64_t n_ctx = slots_[slot].n_ctx();
      if (r->prompt.empty() || static_cast<int64_t>(r->prompt.size()) >= n_ctx) {
        n_parked_.fetch_sub(1);
        if (r->on_done) {
          r->on_done(make_error(ErrorCode::kContextOverflow,
                                format("a prompt of %zu tokens does not fit a sequence's context "
                                       "of %lld with room to generate",
                                       r->prompt.size(), static_cast<long long>(n_ctx))),
                     false);
        }
        continue;
      }
      s = std::make_unique<Seq>(std::move(*r), n_admitted_++, n_ctx, shutdown_);
      s->logits.resize(static_cast<size_t>(model_.hparams().n_vocab));
    }
    // Counted as parked until it runs, so submit() never sees it nowhere.
    if (!place(*s, slot)) {
      parked_.push_front(std::move(s));
      break;
    }
    n_running_.fetch_add(1);
    n_parked_.fetch_sub(1);
    Seq& placed = *(running_[slot] = std::move(s));
    if (!placed.started) {
      placed.started = true;
      if (placed.request.on_start) placed.request.on_start();
    }
  }
  if (paged()) reserve_decode_blocks();

  // The parts: one token of every decoding sequence, then prompt chunks, oldest first,
  // within what the budget leaves (at least one token, so prompts always move).
  parts_.clear();
  part_seqs_.clear();
  int64_t n_decode = 0;
  for (std::unique_ptr<Seq>& s : running_) {
    if (s == nullptr || !s->decoding) continue;
    parts_.push_back(SeqForward{std::span<const int32_t>(&s->next, 1), s->kv->n_tokens(), s->kv,
                                false, s->logits.data()});
    part_seqs_.push_back(s.get());
    ++n_decode;
  }
  int64_t budget = std::max<int64_t>(1, n_batch_ - n_decode);
  int64_t n_prefill = 0;
  for (std::unique_ptr<Seq>& s : running_) {
    if (s == nullptr || s->decoding || budget == 0) continue;
    // Its prompt, or after a preemption what it recomputes (no logits: `next` is known).
    const std::span<const int32_t> feed = s->feed();
    const auto n_feed = static_cast<int64_t>(feed.size());
    const int64_t n = std::min(budget, n_feed - s->n_fed);
    const bool last = s->n_fed + n == n_feed && !s->prompt_done;
    parts_.push_back(SeqForward{feed.subspan(static_cast<size_t>(s->n_fed), static_cast<size_t>(n)),
                                s->n_fed, s->kv, false, last ? s->logits.data() : nullptr});
    part_seqs_.push_back(s.get());
    budget -= n;
    n_prefill += n;
  }
  if (parts_.empty()) {
    store_gauges();
    return false;
  }
  n_steps_.fetch_add(1);
  if (n_decode > 0 && n_prefill > 0) n_mixed_steps_.fetch_add(1);

  // A step of decode tokens alone: each row may go through the backend as it would alone.
  backend_.set_decode_rows(n_prefill == 0);
  const Result<void> ran = model_.forward_batch(backend_, parts_);
  backend_.set_decode_rows(false);
  const Clock::time_point after = Clock::now();
  for (size_t i = 0; i < parts_.size(); ++i) {
    Seq& s = *part_seqs_[i];
    if (!ran.ok()) {
      finish(s, ran.error(), false);
      continue;
    }
    if (!s.decoding) {
      s.n_fed += static_cast<int64_t>(parts_[i].tokens.size());
      publish(s, {});
      if (parts_[i].logits == nullptr) {
        // A recomputed sequence decodes its pending token from the next step.
        if (s.prompt_done && s.n_fed == static_cast<int64_t>(s.feed().size())) s.decoding = true;
        continue;
      }
      // The whole prompt is in: the sampler sees it, and the first token comes from its
      // last row, as in generate().
      s.result.timings.prompt_ms = ms_between(s.t_start, after);
      s.result.timings.n_passes = 1;
      for (const int32_t t : s.request.prompt) s.request.sampler.accept_prompt(t);
      s.decoding = true;
      s.prompt_done = true;
      if (s.emitter.budget_spent()) {
        s.result.stop_reason = StopReason::kLength;
        finish(s, std::move(s.result), false);
        continue;
      }
    } else {
      ++s.result.timings.n_passes;
    }
    const int32_t token = s.request.sampler.sample(s.logits);
    if (const std::optional<StopReason> stop = s.emitter.emit(token, s.kv->n_free())) {
      s.result.stop_reason = *stop;
      s.result.timings.gen_ms = ms_between(s.t_start, Clock::now()) - s.result.timings.prompt_ms;
      const bool timed_out = *stop == StopReason::kInterrupted && !shutdown_->load() &&
                             !is_set(s.request.cancel) && Clock::now() >= s.params.deadline;
      finish(s, std::move(s.result), timed_out);
      continue;
    }
    s.next = token;
  }
  store_gauges();
  return true;
}

void BatchScheduler::run() {
  for (;;) {
    if (step()) continue;
    std::unique_lock<std::mutex> lock(mutex_);
    if (shutdown_->load() && queue_.empty() && n_running_.load() == 0 && n_parked_.load() == 0)
      return;
    // Idle: wait for a request (or shutdown); a short timeout also ends queued requests
    // whose client left, as a step would.
    wake_.wait_for(lock, std::chrono::milliseconds(50),
                   [&] { return !queue_.empty() || shutdown_->load(); });
  }
}

}  // namespace qrun
