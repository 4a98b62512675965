// The qrun subcommands. run_main parses argv with CLI11, runs one subcommand, prints
// any Error as one line on stderr and returns its documented exit code.
#pragma once

namespace qrun::cli {

int run_main(int argc, char** argv);

}  // namespace qrun::cli
