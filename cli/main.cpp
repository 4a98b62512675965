// Entry point of the qrun binary: hands argv to the command dispatcher.
#include "cli/commands.h"

int main(int argc, char** argv) {
  return qrun::cli::run_main(argc, argv);
}
