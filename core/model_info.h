// A model file described for people: what `qrun info` prints and `qrun bench` records.
// Works on any GGUF file, including vocab-only files and architectures qrun cannot run;
// fields the file does not carry are left empty.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"

namespace qrun {

struct SpecialToken {
  std::string role;  // "bos", "eos", ...
  int64_t id = -1;
  std::string text;
};

struct ModelInfo {
  std::string path;
  size_t file_size = 0;
  uint32_t gguf_version = 0;
  size_t n_metadata = 0;
  std::string name;          // general.name
  std::string architecture;  // general.architecture
  std::string file_type;     // general.file_type as a name ("Q4_K_M"), if present
  int64_t n_params = 0;      // sum of tensor elements
  size_t n_tensor_bytes = 0;
  // Shape hyper-parameters from "<arch>.*" keys (-1 when absent).
  int64_t n_embd = -1, n_layer = -1, n_head = -1, n_head_kv = -1, n_ff = -1, n_ctx_train = -1;
  int64_t head_dim = -1, n_vocab = -1;
  // Mixture of experts (-1 when absent): experts per layer, experts used per token, each
  // expert's feed-forward width, and the parameters one token runs through (the experts'
  // tensors counted at n_expert_used / n_expert).
  int64_t n_expert = -1, n_expert_used = -1, n_ff_exp = -1;
  int64_t n_ff_shexp = -1;  // the shared expert's width, where the file has one
  int64_t n_active_params = 0;
  std::optional<double> rms_eps;
  std::optional<double> rope_freq_base;
  int64_t rope_dims = -1;
  std::string rope_scaling;     // "none", "linear x4", "longrope from 4096 x1.19", ...
  int64_t sliding_window = -1;  // positions a local layer attends; -1: no sliding window
  // A window the file states but qrun does not apply, as llama.cpp does not (phi3); -1: none.
  int64_t ignored_sliding_window = -1;
  // Logit soft-caps (Gemma 2's attention and output; Gemma 3's output where the file says),
  // with the architecture's defaults where the file has no key; empty: none.
  std::optional<double> attn_softcap, final_softcap;
  std::string tokenizer_model;  // "llama", "gpt2", ...
  std::string tokenizer_pre;
  std::vector<SpecialToken> special_tokens;
  std::optional<bool> add_bos;
  size_t chat_template_bytes = 0;  // 0: none
  // Tensor-type histogram: type name -> (count, bytes).
  std::map<std::string, std::pair<int64_t, size_t>> type_histogram;
};

ModelInfo describe_model(const gguf::File& file);

// How much of tensor `t` of `file` one token runs through, as used / of: n_expert_used /
// n_expert for an expert tensor (*_exps.weight) of a mixture of experts, 1 / 1 otherwise.
struct TokenShare {
  int64_t used = 1;
  int64_t of = 1;
};
TokenShare token_share(const gguf::File& file, const gguf::TensorInfo& t);

// Formats a count as "260.1K", "1.10B".
std::string human_count(double n);
// Formats bytes as "1.13 MiB".
std::string human_bytes(double n);
// Name of a llama.cpp `general.file_type` value ("Q4_K_M"), or "" if unknown.
std::string file_type_name(int64_t file_type);

}  // namespace qrun
