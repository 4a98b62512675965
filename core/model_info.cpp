// describe_model: reads a GGUF file's metadata and tensor table into a ModelInfo.
#include "core/model_info.h"

#include <cmath>
#include <string_view>

namespace qrun {
namespace {

int64_t int_or(const gguf::File& f, const std::string& key, int64_t fallback) {
  const gguf::Value* v = f.find(key);
  return v && v->is_integer() ? v->as_int() : fallback;
}

std::optional<double> float_opt(const gguf::File& f, const std::string& key) {
  const gguf::Value* v = f.find(key);
  if (v && (v->is_float() || v->is_integer())) return v->as_double();
  return std::nullopt;
}

std::string string_or(const gguf::File& f, const std::string& key) {
  const gguf::Value* v = f.find(key);
  return v && v->type() == gguf::ValueType::kString ? v->as_string() : std::string();
}

}  // namespace

std::string file_type_name(int64_t file_type) {
  // llama.cpp's llama_ftype values.
  static const std::map<int64_t, const char*> kNames = {
      {0, "F32"},      {1, "F16"},      {2, "Q4_0"},       {3, "Q4_1"},    {7, "Q8_0"},
      {8, "Q5_0"},     {9, "Q5_1"},     {10, "Q2_K"},      {11, "Q3_K_S"}, {12, "Q3_K_M"},
      {13, "Q3_K_L"},  {14, "Q4_K_S"},  {15, "Q4_K_M"},    {16, "Q5_K_S"}, {17, "Q5_K_M"},
      {18, "Q6_K"},    {19, "IQ2_XXS"}, {20, "IQ2_XS"},    {21, "Q2_K_S"}, {22, "IQ3_XS"},
      {23, "IQ3_XXS"}, {24, "IQ1_S"},   {25, "IQ4_NL"},    {26, "IQ3_S"},  {27, "IQ3_M"},
      {28, "IQ2_S"},   {29, "IQ2_M"},   {30, "IQ4_XS"},    {31, "IQ1_M"},  {32, "BF16"},
      {36, "TQ1_0"},   {37, "TQ2_0"},   {38, "MXFP4_MOE"},
  };
  auto it = kNames.find(file_type);
  return it == kNames.end() ? std::string() : it->second;
}

std::string human_count(double n) {
  if (n >= 1e9) return format("%.2fB", n / 1e9);
  if (n >= 1e6) return format("%.2fM", n / 1e6);
  if (n >= 1e3) return format("%.1fK", n / 1e3);
  return format("%.0f", n);
}

std::string human_bytes(double n) {
  if (n >= 1024.0 * 1024 * 1024) return format("%.2f GiB", n / (1024.0 * 1024 * 1024));
  if (n >= 1024.0 * 1024) return format("%.2f MiB", n / (1024.0 * 1024));
  if (n >= 1024.0) return format("%.1f KiB", n / 1024.0);
  return format("%.0f B", n);
}

ModelInfo describe_model(const gguf::File& f) {
  ModelInfo m;
  m.path = f.path();
  m.file_size = f.file_size();
  m.gguf_version = f.version();
  m.n_metadata = f.metadata().size();
  m.name = string_or(f, "general.name");
  m.architecture = string_or(f, "general.architecture");
  if (const int64_t ft = int_or(f, "general.file_type", -1); ft >= 0) {
    m.file_type = file_type_name(ft);
    if (m.file_type.empty()) m.file_type = format("type %lld", static_cast<long long>(ft));
  }
  const std::string a = m.architecture + ".";
  m.n_expert = int_or(f, a + "expert_count", -1);
  m.n_expert_used = int_or(f, a + "expert_used_count", -1);
  if (m.n_expert > 0 && m.n_expert_used > 0 && m.n_expert_used <= m.n_expert) {
    m.n_ff_exp = int_or(f, a + "expert_feed_forward_length", -1);
    m.n_ff_shexp = int_or(f, a + "expert_shared_feed_forward_length", -1);
  }
  for (const gguf::TensorInfo& t : f.tensors()) {
    m.n_params += t.n_elements();
    const TokenShare share = token_share(f, t);
    m.n_active_params += t.n_elements() / share.of * share.used;
    m.n_tensor_bytes += t.n_bytes;
    auto& [count, bytes] = m.type_histogram[dtype_name(t.type)];
    ++count;
    bytes += t.n_bytes;
  }

  m.n_embd = int_or(f, a + "embedding_length", -1);
  m.n_layer = int_or(f, a + "block_count", -1);
  m.n_ff = int_or(f, a + "feed_forward_length", -1);
  // qwen2moe's shared expert is feed_forward_length wide when its key is absent.
  if (m.n_ff_shexp < 0 && f.find_tensor("blk.0.ffn_gate_shexp.weight") != nullptr)
    m.n_ff_shexp = m.n_ff;
  m.n_head = int_or(f, a + "attention.head_count", -1);
  m.n_head_kv = int_or(f, a + "attention.head_count_kv", m.n_head);
  m.n_ctx_train = int_or(f, a + "context_length", -1);
  m.head_dim = int_or(f, a + "attention.key_length",
                      m.n_head > 0 && m.n_embd > 0 ? m.n_embd / m.n_head : -1);
  m.rms_eps = float_opt(f, a + "attention.layer_norm_rms_epsilon");
  m.rope_freq_base = float_opt(f, a + "rope.freq_base");
  m.rope_dims = int_or(f, a + "rope.dimension_count", m.head_dim);
  const bool gemma2 = m.architecture == "gemma2";  // llama.cpp's defaults for Gemma 2
  m.sliding_window = int_or(f, a + "attention.sliding_window", gemma2 ? 4096 : -1);
  m.attn_softcap = float_opt(f, a + "attn_logit_softcapping");
  m.final_softcap = float_opt(f, a + "final_logit_softcapping");
  if (gemma2 && !m.attn_softcap) m.attn_softcap = 50.0;
  if (gemma2 && !m.final_softcap) m.final_softcap = 30.0;
  if (!gemma2) m.attn_softcap.reset();  // (llama.cpp caps attention for Gemma 2 alone)
  if (m.final_softcap && *m.final_softcap <= 0.0) m.final_softcap.reset();
  if (m.architecture == "phi3" && m.sliding_window > 0) {
    m.ignored_sliding_window = m.sliding_window;
    m.sliding_window = -1;
  }
  const std::string scaling = string_or(f, a + "rope.scaling.type");
  const std::optional<double> factor = float_opt(f, a + "rope.scaling.factor");
  if (scaling.empty() || scaling == "none") {
    m.rope_scaling =
        factor && *factor != 1.0 && *factor != 0.0 ? format("linear x%g", *factor) : "none";
  } else {
    m.rope_scaling = factor ? format("%s x%g", scaling.c_str(), *factor) : scaling;
  }
  // Phi-3's LongRoPE: per-pair factors, chosen by the context against the original one.
  if (f.find_tensor("rope_factors_long.weight") != nullptr) {
    const int64_t orig = int_or(f, a + "rope.scaling.original_context_length", m.n_ctx_train);
    const std::optional<double> attn = float_opt(f, a + "rope.scaling.attn_factor");
    m.rope_scaling =
        format("longrope from %lld x%g", static_cast<long long>(orig), attn ? *attn : 1.0);
  }

  m.tokenizer_model = string_or(f, "tokenizer.ggml.model");
  m.tokenizer_pre = string_or(f, "tokenizer.ggml.pre");
  const gguf::Value* tokens = f.find("tokenizer.ggml.tokens");
  std::vector<std::string> none;
  const bool have_tokens = tokens && tokens->type() == gguf::ValueType::kArray &&
                           tokens->as_array().elem_type == gguf::ValueType::kString;
  if (have_tokens) m.n_vocab = static_cast<int64_t>(tokens->as_array().items.size());
  if (m.n_vocab < 0) m.n_vocab = int_or(f, a + "vocab_size", -1);
  static const char* kRoles[] = {"bos",     "eos", "eot", "eom", "unknown",
                                 "padding", "sep", "cls", "mask"};
  for (const char* role : kRoles) {
    const int64_t id = int_or(f, format("tokenizer.ggml.%s_token_id", role), -1);
    // Absent, or set to -1 stored as an unsigned (0xffffffff), as some converters do.
    if (id < 0 || id == 0xffffffff || (m.n_vocab > 0 && id >= m.n_vocab)) continue;
    SpecialToken s{role, id, ""};
    if (have_tokens && id < m.n_vocab) s.text = tokens->as_array().items[id].as_string();
    m.special_tokens.push_back(std::move(s));
  }
  if (const gguf::Value* v = f.find("tokenizer.ggml.add_bos_token");
      v && v->type() == gguf::ValueType::kBool) {
    m.add_bos = std::get<bool>(v->data);
  }
  m.chat_template_bytes = string_or(f, "tokenizer.chat_template").size();
  return m;
}

TokenShare token_share(const gguf::File& file, const gguf::TensorInfo& t) {
  if (!std::string_view(t.name).ends_with("_exps.weight")) return {};
  const std::string a = string_or(file, "general.architecture") + ".";
  const int64_t n_expert = int_or(file, a + "expert_count", -1);
  const int64_t n_used = int_or(file, a + "expert_used_count", -1);
  if (n_expert <= 0 || n_used <= 0 || n_used > n_expert) return {};
  return {n_used, n_expert};
}

}  // namespace qrun
