// `qrun synth`: writes a model of one of the architectures qrun runs, with random weights
// (see models/synth.h).
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/demo_model.h"
#include "cli/text_file.h"
#include "models/synth.h"

namespace qrun::cli {
namespace {

struct SynthCliOptions {
  std::string out;
  std::string arch = "llama";
  std::string like = "tiny";
  std::string type = "q4_0";
  std::string vocab;
  uint64_t seed = 42;
  // 0: the preset's. The flags' ranges keep every size and its products far from overflow.
  int64_t n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, n_ff = 0, n_ctx = 0, head_dim = 0;
  int64_t rope_dims = 0;
  int64_t sliding_window = 0;
  int64_t orig_ctx = 0;
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
  float weight_std = 0.02f;
  float attn_softcap = 0.0f, final_softcap = 0.0f;
  std::string rope_scaling;
  float rope_factor = 0.0f;
  bool tied = false;
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

Result<void> run_synth(const SynthCliOptions& o) {
  std::optional<models::SynthShape> shape = models::synth_preset(o.like);
  if (!shape) {
    return make_error(ErrorCode::kUsage,
                      format("synth: unknown --like '%s' (known: %s)", o.like.c_str(),
                             join(models::synth_preset_names()).c_str()));
  }
  auto override_if = [](int64_t v, int64_t& field) {
    if (v > 0) field = v;
  };
  override_if(o.n_embd, shape->n_embd);
  override_if(o.n_layer, shape->n_layer);
  override_if(o.n_head, shape->n_head);
  override_if(o.n_head_kv, shape->n_head_kv);
  override_if(o.n_ff, shape->n_ff);
  override_if(o.n_ctx, shape->n_ctx);
  override_if(o.head_dim, shape->head_dim);
  override_if(o.rope_dims, shape->rope_dims);
  shape->sliding_window = o.sliding_window;
  shape->rope_orig_ctx = o.orig_ctx;
  override_if(o.n_expert, shape->n_expert);
  override_if(o.n_expert_used, shape->n_expert_used);
  override_if(o.n_ff_exp, shape->n_ff_exp);
  override_if(o.n_ff_shexp, shape->n_ff_shexp);
  if (!(o.weight_std > 0.0f && o.weight_std < 100.0f)) {
    return make_error(ErrorCode::kUsage,
                      format("synth: --std %g must be positive and below 100", o.weight_std));
  }
  if (o.tied) shape->tied_output = true;
  QRUN_TRY(check_output_path("-o", o.out));

  Result<gguf::File> vocab = o.vocab.empty() ? open_demo_model() : open_gguf("--vocab", o.vocab);
  if (!vocab.ok()) return vocab.error();
  if (o.vocab.empty())
    std::fprintf(stderr, "qrun: synth: no --vocab given, using the vocabulary of %s\n",
                 kDemoModelName);

  models::SynthOptions so;
  so.arch = o.arch;
  so.shape = *shape;
  so.weight_std = o.weight_std;
  so.recipe = o.type;
  so.seed = o.seed;
  so.attn_softcap = o.attn_softcap;
  so.rope_scaling = o.rope_scaling;
  so.rope_factor = o.rope_factor;
  so.final_softcap = o.final_softcap;
  so.name = "qrun-synth-" + (o.arch == "llama" ? "" : o.arch + "-") + o.like + "-" + o.type;
  const auto t0 = std::chrono::steady_clock::now();
  QRUN_TRY(models::write_synthetic_model(so, *vocab, o.out));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "qrun: wrote %s (%s, %s, %s) in %.1f s\n", o.out.c_str(), o.arch.c_str(),
               o.like.c_str(), o.type.c_str(), secs);
  return {};
}

}  // namespace

void register_synth(CLI::App& app, Action* selected) {
  auto o = std::make_shared<SynthCliOptions>();
  CLI::App* cmd = app.add_subcommand("synth", "Write a llama-shaped model with random weights");
  add_file_option(cmd, "-o,--output", o->out, "Output GGUF file")->required();
  cmd->add_option("--arch", o->arch, "Architecture: " + join(models::synth_arch_names()))
      ->capture_default_str();
  cmd->add_option("--like", o->like, "Shape preset: " + join(models::synth_preset_names()))
      ->capture_default_str();
  cmd->add_option("--type", o->type, "Weight type or recipe: " + join(models::synth_recipe_names()))
      ->capture_default_str();
  add_file_option(cmd, "--vocab", o->vocab,
                  "GGUF file to copy the tokenizer from (default: the demo model's)");
  cmd->add_option("--seed", o->seed, "Random seed")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--n-embd", o->n_embd, "Override the embedding width")
      ->check(CLI::Range(int64_t{0}, int64_t{1 << 16}));
  cmd->add_option("--n-layer", o->n_layer, "Override the number of layers")
      ->check(CLI::Range(int64_t{0}, int64_t{1 << 10}));
  cmd->add_option("--n-head", o->n_head, "Override the number of attention heads")
      ->check(CLI::Range(int64_t{0}, int64_t{1 << 10}));
  cmd->add_option("--n-head-kv", o->n_head_kv, "Override the number of KV heads")
      ->check(CLI::Range(int64_t{0}, int64_t{1 << 10}));
  cmd->add_option("--n-ff", o->n_ff, "Override the feed-forward width")
      ->check(CLI::Range(int64_t{0}, int64_t{1 << 20}));
  cmd->add_option("--ctx", o->n_ctx, "Override the trained context length")
      ->check(CLI::Range(int64_t{0}, int64_t{1 << 24}));
  cmd->add_option("--head-dim", o->head_dim, "Head size (default: n_embd / n_head)")
      ->check(CLI::Range(int64_t{0}, int64_t{1 << 12}));
  cmd->add_option("--rope-dims", o->rope_dims, "Rotated elements per head (default: head size)")
      ->check(CLI::Range(int64_t{0}, int64_t{1 << 12}));
  cmd->add_option("--sliding-window", o->sliding_window,
                  "gemma2, gemma3: the local layers' attention window (default 512); phi3: the key")
      ->check(CLI::Range(int64_t{0}, int64_t{1 << 24}));
  cmd->add_option("--orig-ctx", o->orig_ctx,
                  "phi3: original context length; below --ctx adds LongRoPE factors; "
                  "--rope-scaling yarn: its original context")
      ->check(CLI::Range(int64_t{0}, int64_t{1 << 24}));
  cmd->add_option("--experts", o->n_expert,
                  "Experts per layer (llama, granite: a mixture of experts; qwen3moe, "
                  "qwen2moe, olmoe, granitemoe: default 8)")
      ->check(CLI::Range(int64_t{0}, int64_t{512}));
  cmd->add_option("--experts-used", o->n_expert_used, "Experts each token uses (default 2)")
      ->check(CLI::Range(int64_t{0}, int64_t{512}));
  cmd->add_option("--expert-ff", o->n_ff_exp,
                  "Each expert's feed-forward width (default: the feed-forward width)")
      ->check(CLI::Range(int64_t{0}, int64_t{1 << 20}));
  cmd->add_option("--shared-expert-ff", o->n_ff_shexp,
                  "The shared expert's feed-forward width (qwen2moe: default the feed-forward "
                  "width; granitemoe: none by default)")
      ->check(CLI::Range(int64_t{0}, int64_t{1 << 20}));
  cmd->add_option("--rope-scaling", o->rope_scaling,
                  "RoPE scaling written to the file: linear or yarn (with --rope-factor; yarn's "
                  "original context from --orig-ctx, default the context)")
      ->check(CLI::IsMember({"linear", "yarn"}));
  cmd->add_option("--rope-factor", o->rope_factor, "RoPE scaling factor (with --rope-scaling)")
      ->check(CLI::Range(1.0f, 1024.0f));
  cmd->add_option("--attn-softcap", o->attn_softcap,
                  "gemma2: attention logit soft-cap (default 50, as Gemma 2's files)")
      ->check(CLI::Range(0.0f, 1e6f));
  cmd->add_option("--final-softcap", o->final_softcap,
                  "gemma2, gemma3: output logit soft-cap (default gemma2 30, gemma3 none)")
      ->check(CLI::Range(0.0f, 1e6f));
  cmd->add_option("--std", o->weight_std, "Standard deviation of the random weights")
      ->capture_default_str();
  cmd->add_flag("--tied", o->tied, "Tie the output projection to the token embedding");
  cmd->callback([o, selected] { *selected = [o] { return run_synth(*o); }; });
}

}  // namespace qrun::cli
