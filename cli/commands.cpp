// Subcommand registration and dispatch, and the mapping from Error to exit code.
#include "cli/commands.h"

#include "cli/gpu_offload.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <vector>

#include "cli/gpu_offload.h"
#include "cli/process_setup.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_table.h"
#include "models/registry.h"
#if defined(QRUN_HAVE_CUDA)
#include "kernels/cuda/cuda_info.h"
#endif

namespace qrun::cli {
namespace {

// `qrun --version`: the version, the backends compiled in and what this host offers.
std::string version_text() {
  std::string archs;
  for (std::string_view a : models::architecture_names())
    archs += (archs.empty() ? "" : ", ") + std::string(a);
  std::string s = std::string("qrun ") + QRUN_VERSION + "\n";
  const kernels::CpuFeatures features = kernels::detect_cpu_features();
  std::string isas;
  for (kernels::Isa isa : kernels::all_isas()) {
    if (kernels::isa_compiled(isa))
      isas += (isas.empty() ? "" : ", ") + std::string(kernels::isa_name(isa));
  }
  s += "cpu backend: kernels for " + isas + "; host cpu: " + features.to_string() +
       "; selected: " + kernels::isa_name(kernels::default_isa()) + "\n";
#if defined(QRUN_HAVE_CUDA)
  s += "cuda backend: compiled for " + kernels::cuda::compiled_architectures() +
       "; devices: " + describe_gpu_devices() + "\n";
#else
  s += "cuda backend: not compiled in\n";
#endif
  s += "architectures: " + archs;
  return s;
}

// llama.cpp's multi-letter single-dash flags, which CLI11 cannot declare, spelled as the
// long flags they stand for.
std::vector<char*> with_aliases(int argc, char** argv) {
  struct Alias {
    std::string_view short_name;
    const char* long_name;
  };
  static constexpr Alias kAliases[] = {
      {"-sys", "--system-prompt"},   {"-np", "--parallel"},      {"-md", "--model-draft"},
      {"-jf", "--json-schema-file"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"},
      {"-ngl", "--n-gpu-layers"},    {"-to", "--timeout"},       {"-kvu", "--kv-unified"},
  };
  std::vector<char*> args(argv, argv + argc);
  for (char*& a : args) {
    for (const Alias& alias : kAliases) {
      // CLI11 takes char* but never writes through it.
      if (alias.short_name != a) continue;
      a = const_cast<char*>(alias.long_name);
      break;
    }
  }
  return args;
}

}  // namespace

int run_main(int argc, char** argv) {
  setup_process();
  CLI::App app{"qrun: run quantized language models from GGUF files"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text());
  Action selected;
  register_run(app, &selected);
  register_chat(app, &selected);
  register_info(app, &selected);
  register_synth(app, &selected);
  register_tokenize(app, &selected);
  register_template(app, &selected);
  register_bench(app, &selected);
  register_quantize(app, &selected);
  register_perplexity(app, &selected);
  register_grammar(app, &selected);
  register_serve(app, &selected);
  // CLI11 would call a misspelt command an extra argument; name it.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->get_name() == argv[1];
    }
    if (!known) {
      std::fprintf(stderr, "qrun: unknown command '%s' (commands: %s)\n", argv[1], names.c_str());
      return static_cast<int>(ErrorCode::kUsage);
    }
  }
  try {
    std::vector<char*> args = with_aliases(argc, argv);
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // prints --help or --version
    // One line, as every other error (CLI11's own message adds a "Run with --help" line).
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::fprintf(stderr, "qrun: %s (see --help)\n", message.c_str());
    return static_cast<int>(ErrorCode::kUsage);
  }
  if (!selected) return 0;
  Result<void> r = selected();
  // Output that never arrived (a full disk, a closed stdout) is a failed run, not exit 0.
  errno = 0;
  if ((std::fflush(stdout) != 0 || std::ferror(stdout)) && r.ok()) {
    r = make_error(ErrorCode::kIo, std::string("cannot write to standard output: ") +
                                       (errno != 0 ? std::strerror(errno) : "write error"));
  }
  if (!r.ok()) {
    std::fprintf(stderr, "qrun: %s\n", r.error().message.c_str());
    return static_cast<int>(r.error().code);
  }
  return 0;
}

}  // namespace qrun::cli
