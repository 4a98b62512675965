// Reference generator, run by hand outside CI: prints llama.cpp's logits for a GGUF model in
// the format tests/data/*_llamacpp.txt use (see tests/data/README.md). It is not part of
// qrun's build; it links llama.cpp's libllama:
//   c++ -std=c++17 -O2 scripts/llamacpp_logits/llamacpp_logits.cpp -I$LLAMA/include \
//     -I$LLAMA/ggml/include -L$LLAMA/build/bin -lllama -lggml -lggml-base \
//     -Wl,-rpath,$LLAMA/build/bin -o /tmp/llamacpp_logits
//   /tmp/llamacpp_logits MODEL.gguf N_CTX N_GREEDY TOKEN_ID...
// The prompt runs as one batch with logits for every position, then N_GREEDY tokens one at a
// time, each the argmax of the previous row. One thread, flash attention on (F16 K/V cache).
// Each output line: `row <position> <argmax> <logits of ids 0, 128, 256, ...>` (%.9g).
// llama.cpp's log is silenced unless LLAMACPP_LOGITS_VERBOSE is set.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "llama.h"

namespace {

constexpr int kStride = 128;

void quiet_log(ggml_log_level, const char*, void*) {}

int argmax(const float* v, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

void print_row(int pos, const float* logits, int n_vocab) {
  std::printf("row %d %d", pos, argmax(logits, n_vocab));
  for (int i = 0; i < n_vocab; i += kStride) std::printf(" %.9g", logits[i]);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s MODEL.gguf N_CTX N_GREEDY TOKEN_ID...\n", argv[0]);
    return 2;
  }
  const int n_ctx = std::atoi(argv[2]);
  const int n_greedy = std::atoi(argv[3]);
  std::vector<llama_token> prompt;
  for (int i = 4; i < argc; ++i) prompt.push_back(std::atoi(argv[i]));

  if (std::getenv("LLAMACPP_LOGITS_VERBOSE") == nullptr) llama_log_set(quiet_log, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(n_ctx);
  cp.n_batch = static_cast<uint32_t>(n_ctx);
  cp.n_ubatch = static_cast<uint32_t>(n_ctx);
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) {
    std::fprintf(stderr, "cannot create a context\n");
    return 1;
  }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  llama_batch batch = llama_batch_init(static_cast<int32_t>(prompt.size()), 0, 1);
  for (size_t i = 0; i < prompt.size(); ++i) {
    batch.token[i] = prompt[i];
    batch.pos[i] = static_cast<llama_pos>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = static_cast<int32_t>(prompt.size());
  if (llama_decode(ctx, batch) != 0) {
    std::fprintf(stderr, "decode failed\n");
    return 1;
  }
  int pos = 0;
  for (; pos < static_cast<int>(prompt.size()); ++pos)
    print_row(pos, llama_get_logits_ith(ctx, pos), n_vocab);
  llama_token next = argmax(llama_get_logits_ith(ctx, pos - 1), n_vocab);
  llama_batch_free(batch);

  for (int i = 0; i < n_greedy; ++i, ++pos) {
    llama_batch one = llama_batch_get_one(&next, 1);
    if (llama_decode(ctx, one) != 0) {
      std::fprintf(stderr, "decode failed at position %d\n", pos);
      return 1;
    }
    const float* row = llama_get_logits_ith(ctx, -1);
    print_row(pos, row, n_vocab);
    next = argmax(row, n_vocab);
  }
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
