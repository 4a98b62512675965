// Subcommand registration and dispatch, and the mapping from Error to exit code.
#include "cli/commands.h"

#include <cstdio>

namespace qrun::cli {

int run_main(int argc, char** argv) {
  CLI::App app{"qrun: run quantized language models from GGUF files"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("qrun ") + QRUN_VERSION);
  Action selected;
  register_run(app, &selected);
  register_info(app, &selected);
  register_synth(app, &selected);
  register_tokenize(app, &selected);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help/version or the parse error
    return rc == 0 ? 0 : static_cast<int>(ErrorCode::kUsage);
  }
  if (!selected) return 0;
  Result<void> r = selected();
  if (!r.ok()) {
    std::fflush(stdout);
    std::fprintf(stderr, "qrun: %s\n", r.error().message.c_str());
    return static_cast<int>(r.error().code);
  }
  return 0;
}

}  // namespace qrun::cli
