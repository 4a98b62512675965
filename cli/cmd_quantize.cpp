// `qrun quantize IN OUT TYPE`: writes IN with its weights in TYPE (models/quantize.h), the
// same tensors llama-quantize writes for that type. Refuses to overwrite IN.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/text_file.h"
#include "cli/threads.h"
#include "models/quant_recipe.h"
#include "models/quantize.h"

namespace qrun::cli {
namespace {

struct QuantizeCliOptions {
  std::string in, out, type;
  bool allow_requantize = false;
  bool pure = false;
  std::optional<std::string> output_type, token_embd_type;  // nullopt: the flag is not given
  int threads = 0;
  bool quiet = false;
};

Result<std::optional<DType>> parse_weight_type(const std::string& flag,
                                               const std::optional<std::string>& given) {
  if (!given) return std::optional<DType>();
  const std::string& name = *given;
  std::optional<DType> t = dtype_from_name(name);
  if (!t || !is_supported(*t) || type_traits(*t).from_float == nullptr || *t == DType::kQ8_K) {
    return make_error(ErrorCode::kUsage,
                      format("quantize: %s: '%s' is not a weight type qrun can write", flag.c_str(),
                             name.c_str()));
  }
  return t;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) && !ec;
}

Result<void> run_quantize(const QuantizeCliOptions& o) {
  models::QuantizeOptions qo;
  qo.recipe = o.type;
  qo.allow_requantize = o.allow_requantize;
  qo.pure = o.pure;
  Result<std::optional<DType>> output_type =
      parse_weight_type("--output-tensor-type", o.output_type);
  if (!output_type.ok()) return output_type.error();
  qo.output_type = *output_type;
  Result<std::optional<DType>> embd_type =
      parse_weight_type("--token-embedding-type", o.token_embd_type);
  if (!embd_type.ok()) return embd_type.error();
  qo.token_embd_type = *embd_type;
  // quantize_model checks this too, but only after opening the input.
  if (Result<models::QuantRecipe> r = models::quant_recipe_or_error(o.type, "quantize"); !r.ok())
    return r.error();
  if (same_file(o.in, o.out)) {
    return make_error(ErrorCode::kUsage,
                      format("quantize: %s: the output would overwrite the input; "
                             "choose another output file",
                             o.out.c_str()));
  }
  QRUN_TRY(check_output_path("quantize: output", o.out));
  Result<gguf::File> in = open_gguf("quantize: input", o.in);
  if (!in.ok()) return in.error();

  ThreadPool pool(capped_threads(o.threads, o.quiet));
  qo.pool = &pool;
  if (!o.quiet) {
    qo.on_tensor = [](size_t i, size_t n, const gguf::TensorInfo& t, DType type) {
      std::fprintf(stderr, "[%4zu/%4zu] %-40s %-5s -> %s\n", i + 1, n, t.name.c_str(),
                   dtype_name(t.type), dtype_name(type));
    };
  }
  const auto t0 = std::chrono::steady_clock::now();
  Result<models::QuantizeStats> stats = models::quantize_model(*in, o.out, qo);
  if (!stats.ok()) return stats.error();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr,
               "qrun: wrote %s (%s): %zu tensors, %zu converted, %.2f MiB -> %.2f MiB in %.1f s\n",
               o.out.c_str(), o.type.c_str(), stats->n_tensors, stats->n_converted,
               static_cast<double>(stats->bytes_in) / (1 << 20),
               static_cast<double>(stats->bytes_out) / (1 << 20), secs);
  return {};
}

}  // namespace

void register_quantize(CLI::App& app, Action* selected) {
  auto o = std::make_shared<QuantizeCliOptions>();
  const std::string types = models::quant_recipe_list();
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Write a model with its weights in another type (llama-quantize's recipes)");
  add_file_option(cmd, "input", o->in, "GGUF file to read")->required();
  add_file_option(cmd, "output", o->out, "GGUF file to write")->required();
  cmd->add_option("type", o->type, "Weight type or mix: " + types)->required();
  cmd->add_flag("--allow-requantize", o->allow_requantize,
                "Accept an input whose weights are already quantized (loses quality)");
  cmd->add_flag("--pure", o->pure, "Every weight in the base type: no mixes, no output rule");
  cmd->add_option("--output-tensor-type", o->output_type, "Type of output.weight");
  cmd->add_option("--token-embedding-type", o->token_embd_type, "Type of token_embd.weight");
  add_threads_option(cmd, o->threads, "Threads (default: physical cores)");
  cmd->add_flag("-q,--quiet", o->quiet, "No per-tensor progress on stderr");
  cmd->callback([o, selected] { *selected = [o] { return run_quantize(*o); }; });
}

}  // namespace qrun::cli
