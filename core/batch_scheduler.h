// Iteration-level continuous batching over one model: a fixed set of sequence slots, each
// with its own KV cache, and a bounded first-come-first-served queue of requests waiting
// for one. Each step() decodes one token for every sequence that is generating and gives
// what is left of a per-step token budget (n_batch) to prompts, in chunks, oldest first
// (chunked prefill), all in one Model::forward_batch call, so the weights are read once
// per step for every sequence and a long prompt never stops the others: it takes the
// budget the decoding sequences leave, a chunk per step, while they go on.
// Each sequence samples with its own Sampler and stops as generate() would (the same
// TokenEmitter): an end-of-generation token, its token budget, a full context, a stop its
// on_token asks for, a complete grammar; or when cancelled, past its time limit, or at
// shutdown (StopReason::kInterrupted). Requests are handed in from any thread (submit());
// steps run on one thread (run(), or step() called directly, as the tests do), and every
// callback of a request runs on that thread.
// Paged slots (KvCache::create_paged over one KvBlockPool, core/kv_block_pool.h): a slot
// holds no memory of its own; a sequence takes the blocks of its whole prompt when it is
// admitted (and waits, first in line, while the pool has too few) and one more block each
// time its decoding crosses a block edge; its blocks go back to the pool when it ends. When
// a decoding sequence finds no free block, the newest running sequence (by admission; the
// one itself when it is the newest) is preempted: its blocks go back (published first, with
// prefix caching, so it may find them again) and it waits, first in line by age, to
// recompute its prompt and its reply so far, then decodes on with the same sampler state.
// The oldest sequence always progresses (a slot's context fits the pool), so nothing
// deadlocks and no request is lost.
// Prefix caching (paged slots, prefix_cache): a sequence publishes the full blocks of its
// prompt as they fill, and of its reply when it ends (KvCache::publish); a later sequence
// whose prompt starts with the same whole blocks shares them (KvCache::attach_prefix) and
// feeds only the rest (at least two tokens, so that its last chunk takes the same gemm path
// as a cold prompt's rather than the one-token decode kernels, which round differently);
// GenerateTimings::n_prompt_cached says how many.
// Contiguous slots (KvCache::create, for a backend that cannot read paged views) each
// hold a whole context.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/generate.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "core/sampling/sampling.h"
#include "ggml-like/backend.h"
#include "ggml-like/result.h"

namespace qrun {

struct SeqRequest {
  std::vector<int32_t> prompt;  // non-empty, and shorter than a slot's context
  int64_t n_predict = -1;       // tokens to generate; < 0: until EOG or the context is full
  double timeout_s = 0;         // seconds from leaving the queue; then kInterrupted. 0: no limit
  Sampler sampler;
  IsEog is_eog;      // null: never
  OnToken on_token;  // each generated (non-EOG) token, as generate()'s
  std::shared_ptr<const std::atomic<bool>> cancel;  // set: ends with kInterrupted; may be null
  // When the sequence first takes a slot (before its prompt runs); may be null.
  std::function<void()> on_start;
  // Exactly once, when it ends: the result as generate() gives it (kInterrupted for a
  // cancel, a time limit or shutdown, also while queued), or the error of its forward pass;
  // timed_out says the time limit ended it.
  std::function<void(Result<GenerateResult> result, bool timed_out)> on_done;
};

class BatchScheduler {
 public:
  // One slot per cache (each shaped for `model`); at most max_queued requests wait when all
  // are busy; n_batch tokens per step at most, as far as decoding allows (every generating
  // sequence decodes its token each step, and a waiting prompt gets at least one token).
  // Once *shutdown is set, every request ends (kInterrupted) at the next step and submit()
  // refuses new ones. `model`, `backend` and *shutdown must outlive the scheduler.
  // Slots are all contiguous or all paged over one pool that holds a whole slot's context.
  BatchScheduler(Model& model, Backend& backend, std::vector<KvCache> slots, int64_t n_batch,
                 int64_t max_queued, const std::atomic<bool>* shutdown, bool prefix_cache = false);
  BatchScheduler(const BatchScheduler&) = delete;
  BatchScheduler& operator=(const BatchScheduler&) = delete;
  ~BatchScheduler();

  enum class Submitted { kQueued, kQueueFull, kShuttingDown };
  // Thread-safe. kQueued: on_done will be called (from the stepping thread); otherwise the
  // request is dropped and no callback runs.
  Submitted submit(SeqRequest request);

  // One iteration: ends cancelled, timed-out (and at shutdown, all) sequences, admits queued
  // requests to free slots, runs one batched forward pass and samples for every sequence
  // that got logits. Returns false when there was nothing to run.
  bool step();
  // Steps until *shutdown is set and every request has ended, sleeping while idle.
  void run();
  // Wakes run() (after setting *shutdown).
  void wake();

  int n_slots() const { return static_cast<int>(slots_.size()); }
  int64_t n_running() const { return n_running_.load(); }
  // Requests waiting: in the queue, and taken from it but waiting for KV blocks.
  int64_t n_queued() const;
  // Tokens in the caches of the running sequences, after the last step.
  int64_t kv_tokens_used() const { return kv_used_.load(); }
  // Paged slots: the pool's blocks, and of them those referenced by a sequence, after the
  // last step (0 and 0 with contiguous slots).
  bool paged() const { return slots_.front().paged(); }
  int64_t kv_blocks_total() const { return blocks_total_; }
  // Prefix caching: sequences that found cached blocks, and the prompt tokens those held.
  bool prefix_cache() const { return prefix_cache_; }
  int64_t n_prefix_hits() const { return prefix_hits_.load(); }
  int64_t n_prefix_tokens() const { return prefix_tokens_.load(); }
  // Paged slots: sequences preempted for want of blocks so far.
  int64_t n_preemptions() const { return n_preemptions_.load(); }
  // The tokens all the slots' caches can hold together (paged: the pool's).
  int64_t kv_tokens_capacity() const { return kv_capacity_; }
  int64_t kv_blocks_used() const { return blocks_used_.load(); }
  // Paged slots: blocks in the prefix cache (referenced or not), after the last step.
  int64_t kv_blocks_cached() const { return blocks_cached_.load(); }
  // Steps run so far, and of them the ones that held prompt tokens and decode tokens at once.
  int64_t n_steps() const { return n_steps_.load(); }
  int64_t n_mixed_steps() const { return n_mixed_steps_.load(); }

 private:
  struct Seq;
  void finish(Seq& seq, Result<GenerateResult> result, bool timed_out);
  // Prefix caching: publishes the full blocks `seq` holds: its prompt, then `generated`.
  void publish(Seq& seq, std::span<const int32_t> generated);
  // Gives `seq` slot `slot`: with paged slots, the blocks of its prompt (false, and nothing
  // held, when the pool has too few).
  bool place(Seq& seq, size_t slot);
  // Paged slots: each decoding sequence's block for its next token, oldest first,
  // preempting the newest running sequences while the pool has none.
  void reserve_decode_blocks();
  // Frees the blocks of running `seq` and parks it to recompute what it had.
  void preempt(Seq& seq);
  void store_gauges();

  Model& model_;
  Backend& backend_;
  std::vector<KvCache> slots_;
  const int64_t n_batch_;
  const int64_t max_queued_;
  const std::atomic<bool>* shutdown_;
  const bool prefix_cache_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<SeqRequest> queue_;      // guarded by mutex_
  std::atomic<int64_t> n_parked_{0};  // parked_.size(), for submit()

  // Stepping thread only: the sequence in each slot (null: free), in admission order, and
  // the forward parts of a step, reserved for every slot.
  std::vector<std::unique_ptr<Seq>> running_;
  std::vector<SeqForward> parts_;
  std::vector<Seq*> part_seqs_;
  // Sequences taken from the queue that wait for KV blocks, oldest first; they take free
  // slots before the queue does.
  std::deque<std::unique_ptr<Seq>> parked_;
  std::vector<Seq*> by_age_;  // the running sequences, oldest first (a step's scratch)
  uint64_t n_admitted_ = 0;   // sequences taken from the queue so far: each one's age

  std::atomic<int64_t> n_running_{0};
  std::atomic<int64_t> kv_used_{0};
  int64_t blocks_total_ = 0;
  int64_t kv_capacity_ = 0;
  std::atomic<int64_t> blocks_used_{0};
  std::atomic<int64_t> blocks_cached_{0};
  std::atomic<int64_t> prefix_hits_{0};
  std::atomic<int64_t> prefix_tokens_{0};
  std::atomic<int64_t> n_preemptions_{0};
  std::atomic<int64_t> n_steps_{0};
  std::atomic<int64_t> n_mixed_steps_{0};
};

}  // namespace qrun
