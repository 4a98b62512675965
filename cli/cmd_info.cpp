// `qrun info MODEL.gguf [--json] [--tensors]`: what a GGUF file holds, for people and
// for scripts. Works on any valid GGUF file, runnable or not; with --ctx N (and the cache
// type flags) it also loads the model and states the KV cache bytes at that context.
#include <climits>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/gpu_offload.h"
#include "cli/session.h"
#include "cli/text_file.h"
#include "core/model_info.h"
#include "models/registry.h"

namespace qrun::cli {
namespace {

struct InfoOptions {
  std::string model;
  bool json = false;
  bool tensors = false;
  int64_t ctx = 0;   // > 0: state the KV cache of this many tokens
  ModelFlags cache;  // only the cache type flags are used
};

// The KV cache qrun would allocate for the model at --ctx with the chosen types.
struct KvPlan {
  int64_t n_ctx = 0;
  KvTypes types;
  size_t bytes = 0;
  size_t bytes_full = 0;  // with every layer holding the whole context
  std::string summary;    // kv_memory_summary
};

Result<KvPlan> plan_kv(const gguf::File& file, const InfoOptions& opts) {
  Result<std::unique_ptr<Model>> model = models::load_model(file);
  if (!model.ok()) return model.error();
  Result<KvCache> kv = make_flagged_kv_cache(**model, opts.cache, opts.ctx);  // not touched
  if (!kv.ok()) return kv.error();
  return KvPlan{opts.ctx, kv_types(opts.cache), kv->n_bytes(), kv->n_bytes_full(),
                kv_memory_summary(*kv)};
}

std::string shape_string(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < t.n_dims; ++d) {
    if (d) s += ", ";
    s += std::to_string(t.ne[d]);
  }
  return s + "]";
}

std::string opt_int(int64_t v) {
  return v < 0 ? "-" : std::to_string(v);
}

void print_text(const gguf::File& file, const ModelInfo& m, bool tensors,
                const std::optional<KvPlan>& kv) {
  std::printf("file           %s (%s, GGUF v%u, %zu tensors, %zu metadata keys)\n", m.path.c_str(),
              human_bytes(static_cast<double>(m.file_size)).c_str(), m.gguf_version,
              file.tensors().size(), m.n_metadata);
  if (!m.name.empty()) std::printf("name           %s\n", m.name.c_str());
  std::printf("architecture   %s\n", m.architecture.empty() ? "-" : m.architecture.c_str());
  if (!m.file_type.empty()) std::printf("file type      %s\n", m.file_type.c_str());
  std::printf("parameters     %s (%lld), %s of tensor data\n",
              human_count(static_cast<double>(m.n_params)).c_str(),
              static_cast<long long>(m.n_params),
              human_bytes(static_cast<double>(m.n_tensor_bytes)).c_str());
  std::printf(
      "shape          n_embd %s, n_layer %s, n_head %s, n_head_kv %s, head_dim %s, "
      "n_ff %s, n_vocab %s\n",
      opt_int(m.n_embd).c_str(), opt_int(m.n_layer).c_str(), opt_int(m.n_head).c_str(),
      opt_int(m.n_head_kv).c_str(), opt_int(m.head_dim).c_str(), opt_int(m.n_ff).c_str(),
      opt_int(m.n_vocab).c_str());
  if (m.n_expert > 0) {
    const std::string shared = m.n_ff_shexp > 0 ? format(", and a shared expert %lld wide",
                                                         static_cast<long long>(m.n_ff_shexp))
                                                : "";
    std::printf(
        "experts        %lld per layer, %s used per token, %s wide%s; %s parameters "
        "active per token\n",
        static_cast<long long>(m.n_expert), opt_int(m.n_expert_used).c_str(),
        opt_int(m.n_ff_exp > 0 ? m.n_ff_exp : m.n_ff).c_str(), shared.c_str(),
        human_count(static_cast<double>(m.n_active_params)).c_str());
  }
  std::printf("context        %s tokens (trained)\n", opt_int(m.n_ctx_train).c_str());
  if (kv) {
    std::printf("kv cache       %lld tokens, %s: %s\n", static_cast<long long>(kv->n_ctx),
                kv_types_text(kv->types).c_str(), kv->summary.c_str());
  }
  std::printf("rope           freq_base %s, dims %s, scaling %s\n",
              m.rope_freq_base ? format("%g", *m.rope_freq_base).c_str() : "-",
              opt_int(m.rope_dims).c_str(), m.rope_scaling.c_str());
  if (m.sliding_window > 0) {
    std::printf("attention      sliding window of %lld positions on the local layers\n",
                static_cast<long long>(m.sliding_window));
  }
  if (m.ignored_sliding_window > 0) {
    std::printf(
        "attention      whole context (the file's sliding window of %lld is not applied, "
        "as in llama.cpp)\n",
        static_cast<long long>(m.ignored_sliding_window));
  }
  if (m.attn_softcap || m.final_softcap) {
    std::printf("soft-caps      attention logits %s, output logits %s\n",
                m.attn_softcap ? format("%g", *m.attn_softcap).c_str() : "none",
                m.final_softcap ? format("%g", *m.final_softcap).c_str() : "none");
  }
  if (m.rms_eps) std::printf("rms norm eps   %g\n", *m.rms_eps);
  std::printf("tokenizer      %s%s%s, %s tokens",
              m.tokenizer_model.empty() ? "-" : m.tokenizer_model.c_str(),
              m.tokenizer_pre.empty() ? "" : ", pre ", m.tokenizer_pre.c_str(),
              opt_int(m.n_vocab).c_str());
  if (m.add_bos) std::printf(", add_bos %s", *m.add_bos ? "true" : "false");
  std::printf("\n");
  if (!m.special_tokens.empty()) {
    std::printf("special tokens");
    for (const SpecialToken& s : m.special_tokens) {
      std::printf(" %s %lld '%s'", s.role.c_str(), static_cast<long long>(s.id), s.text.c_str());
    }
    std::printf("\n");
  }
  std::printf("chat template  %s\n",
              m.chat_template_bytes ? format("present (%zu bytes)", m.chat_template_bytes).c_str()
                                    : "none");
  std::printf("tensor types  ");
  for (const auto& [name, cb] : m.type_histogram) {
    std::printf(" %s: %lld (%s)", name.c_str(), static_cast<long long>(cb.first),
                human_bytes(static_cast<double>(cb.second)).c_str());
  }
  std::printf("\n");
  std::printf("gpu            %s\n", describe_gpu(file).c_str());
  if (!tensors) return;
  std::printf("\n%-4s %-40s %-8s %-24s %12s %12s\n", "#", "tensor", "type", "shape", "offset",
              "bytes");
  int i = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    std::printf("%-4d %-40s %-8s %-24s %12llu %12zu\n", i++, t.name.c_str(), dtype_name(t.type),
                shape_string(t).c_str(), static_cast<unsigned long long>(t.file_offset), t.n_bytes);
  }
}

nlohmann::json to_json(const gguf::File& file, const ModelInfo& m, bool tensors,
                       const std::optional<KvPlan>& kv) {
  using nlohmann::json;
  auto opt = [](int64_t v) { return v < 0 ? json(nullptr) : json(v); };
  json j = {
      {"path", m.path},
      {"file_size", m.file_size},
      {"gguf_version", m.gguf_version},
      {"name", m.name},
      {"architecture", m.architecture},
      {"file_type", m.file_type},
      {"n_params", m.n_params},
      {"n_tensor_bytes", m.n_tensor_bytes},
      {"n_tensors", file.tensors().size()},
      {"n_metadata", m.n_metadata},
      {"n_embd", opt(m.n_embd)},
      {"n_layer", opt(m.n_layer)},
      {"n_head", opt(m.n_head)},
      {"n_head_kv", opt(m.n_head_kv)},
      {"head_dim", opt(m.head_dim)},
      {"n_ff", opt(m.n_ff)},
      {"n_expert", opt(m.n_expert)},
      {"n_expert_used", opt(m.n_expert_used)},
      {"n_ff_exp", opt(m.n_ff_exp)},
      {"n_ff_shexp", opt(m.n_ff_shexp)},
      {"n_active_params", m.n_active_params},
      {"n_vocab", opt(m.n_vocab)},
      {"n_ctx_train", opt(m.n_ctx_train)},
      {"rope_freq_base", m.rope_freq_base ? json(*m.rope_freq_base) : json(nullptr)},
      {"rope_dims", opt(m.rope_dims)},
      {"rope_scaling", m.rope_scaling},
      {"sliding_window", m.sliding_window > 0 ? json(m.sliding_window) : json(nullptr)},
      {"attn_softcap", m.attn_softcap ? json(*m.attn_softcap) : json(nullptr)},
      {"final_softcap", m.final_softcap ? json(*m.final_softcap) : json(nullptr)},
      {"ignored_sliding_window",
       m.ignored_sliding_window > 0 ? json(m.ignored_sliding_window) : json(nullptr)},
      {"rms_norm_eps", m.rms_eps ? json(*m.rms_eps) : json(nullptr)},
      {"tokenizer_model", m.tokenizer_model},
      {"tokenizer_pre", m.tokenizer_pre},
      {"add_bos", m.add_bos ? json(*m.add_bos) : json(nullptr)},
      {"chat_template", m.chat_template_bytes > 0},
  };
  json specials = json::object();
  for (const SpecialToken& s : m.special_tokens)
    specials[s.role] = {{"id", s.id}, {"text", s.text}};
  j["special_tokens"] = specials;
  json hist = json::object();
  for (const auto& [name, cb] : m.type_histogram)
    hist[name] = {{"count", cb.first}, {"bytes", cb.second}};
  j["tensor_types"] = hist;
  if (kv) {
    j["kv_cache"] = {{"n_ctx", kv->n_ctx},
                     {"type_k", dtype_name(kv->types.k)},
                     {"type_v", dtype_name(kv->types.v)},
                     {"bytes", kv->bytes},
                     {"bytes_full_layers", kv->bytes_full}};
  }
  if (tensors) {
    json list = json::array();
    for (const gguf::TensorInfo& t : file.tensors()) {
      list.push_back({{"name", t.name},
                      {"type", dtype_name(t.type)},
                      {"shape", std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)},
                      {"offset", t.file_offset},
                      {"bytes", t.n_bytes}});
    }
    j["tensors"] = list;
  }
  return j;
}

Result<void> run_info(const InfoOptions& opts) {
  if (opts.model.empty())
    return make_error(ErrorCode::kUsage, "info: no model given (qrun info MODEL.gguf)");
  Result<gguf::File> file = open_gguf("info", opts.model);
  if (!file.ok()) return file.error();
  const ModelInfo m = describe_model(*file);
  std::optional<KvPlan> kv;
  if (opts.ctx > 0) {
    Result<KvPlan> plan = plan_kv(*file, opts);
    if (!plan.ok()) return plan.error();
    kv = std::move(*plan);
  }
  if (opts.json) {
    // Invalid UTF-8 in names or token texts is replaced rather than aborting the dump.
    std::printf("%s\n", to_json(*file, m, opts.tensors, kv)
                            .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                            .c_str());
  } else {
    print_text(*file, m, opts.tensors, kv);
  }
  return {};
}

}  // namespace

void register_info(CLI::App& app, Action* selected) {
  auto opts = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "Describe a GGUF model file");
  add_file_option(cmd, "model", opts->model, "GGUF file");
  add_file_option(cmd, "-m,--model", opts->model, "GGUF file (alternative to the positional form)");
  cmd->add_flag("--json", opts->json, "Print one JSON object instead of text");
  cmd->add_flag("--tensors", opts->tensors, "List every tensor with type, shape and offset");
  cmd->add_option("--ctx", opts->ctx,
                  "State the KV cache bytes at this context (loads the model; with "
                  "--cache-type, -ctk, -ctv)")
      ->check(CLI::Range(int64_t{1}, int64_t{INT32_MAX}));
  add_cache_type_flags(cmd, opts->cache);
  cmd->callback([opts, selected] { *selected = [opts] { return run_info(*opts); }; });
}

}  // namespace qrun::cli
