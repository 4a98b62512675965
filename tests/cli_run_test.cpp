// End-to-end tests of `qrun run` through the built binary: byte-exact greedy
// continuations against llama.cpp's, the scripting contract (stdout holds only the text,
// piped stdin, --json), documented exit codes, and a clean stop on SIGINT.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

std::string qrun() {
  return qrun_binary().string();
}

nlohmann::json golden(const std::string& model, const std::string& prompt) {
  return nlohmann::json::parse(read_text(data_path("golden/" + model + "." + prompt + ".json")));
}

std::string model_path(const std::string& model) {
  return data_path("models/" + model + ".gguf").string();
}

// The golden prompts' texts (the long one is recovered from its tokens by the tokenizer test).
const char* kOnce = "Once upon a time";
const char* kPark = "Lily and Tom went to the park. They";

TEST(CliRun, GreedyContinuationMatchesLlamaCppByteForByte) {
  // Exactness on every model is the golden test's job (forward_golden_test); here the
  // binary's stdout is checked byte for byte on models where no step is close to a tie.
  for (const char* model : {"stories260K", "stories260K-Q8_0"}) {
    for (auto [name, text] : {std::pair{"once", kOnce}, std::pair{"park", kPark}}) {
      SCOPED_TRACE(std::string(model) + " / " + name);
      const nlohmann::json g = golden(model, name);
      CommandResult r = run_command(qrun() + " run -q --temp 0 -n 48 --cache-type f32 -m '" +
                                    model_path(model) + "' -p '" + text + "'");
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(r.out, g["greedy_text"].get<std::string>());
      EXPECT_TRUE(r.err.empty()) << r.err;
    }
  }
}

TEST(CliRun, JsonCarriesTokensStopReasonAndTimings) {
  const nlohmann::json g = golden("stories260K", "once");
  CommandResult r = run_command(qrun() + " run -q --json --temp 0 -n 48 -m '" +
                                model_path("stories260K") + "' -p '" + kOnce + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_tokens"], g["prompt_tokens"]);
  EXPECT_EQ(j["tokens"], g["greedy_tokens"]);
  EXPECT_EQ(j["text"], g["greedy_text"]);
  EXPECT_EQ(j["stop_reason"], "length");
  EXPECT_EQ(j["timings"]["prompt_tokens"], g["prompt_tokens"].size());
  EXPECT_GT(j["timings"]["ttft_ms"].get<double>(), 0.0);
}

TEST(CliRun, PipedStdinIsThePromptOrContext) {
  const nlohmann::json g = golden("stories260K", "once");
  // A pipeline: no terminal anywhere, stdin is the prompt, stdout only the text.
  CommandResult piped = run_command(
      qrun() + " run --temp 0 -n 48 -m '" + model_path("stories260K") + "' | wc -c", kOnce);
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(std::stoul(piped.out), g["greedy_text"].get<std::string>().size());

  // With -p, stdin is context placed before the prompt, joined by a newline.
  CommandResult ctx = run_command(qrun() + " run -q --json --temp 0 -n 4 -m '" +
                                      model_path("stories260K") + "' -p 'upon a time'",
                                  "Once");
  CommandResult joined =
      run_command(qrun() + " run -q --json --temp 0 -n 4 --no-stdin -m '" +
                  model_path("stories260K") + "' -p \"$(printf 'Once\\nupon a time')\"");
  ASSERT_EQ(ctx.exit_code, 0) << ctx.err;
  ASSERT_EQ(joined.exit_code, 0) << joined.err;
  EXPECT_EQ(nlohmann::json::parse(ctx.out)["prompt_tokens"],
            nlohmann::json::parse(joined.out)["prompt_tokens"]);
}

TEST(CliRun, DemoModelIsTheDefault) {
  CommandResult r = run_command(qrun() + " run --temp 0 -n 48 -p '" + std::string(kOnce) + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, golden("stories260K", "once")["greedy_text"].get<std::string>());
  EXPECT_NE(r.err.find("embedded demo model"), std::string::npos) << r.err;
}

TEST(CliRun, ErrorsHaveDocumentedExitCodes) {
  const std::string m = model_path("stories260K");
  CommandResult overflow = run_command(qrun() + " run -q -c 8 -m '" + m +
                                       "' -p 'Lily and Tom went to the park. They played'");
  EXPECT_EQ(overflow.exit_code, 6) << overflow.err;
  EXPECT_NE(overflow.err.find("--ctx-size"), std::string::npos) << overflow.err;
  EXPECT_TRUE(overflow.out.empty());

  CommandResult missing = run_command(qrun() + " run -q -m /nonexistent.gguf -p hi");
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
  CommandResult corrupt = run_command(
      qrun() + " run -q -m '" +
      data_path("models/invalid/tinyllamas-stories-260k-q8_0.BADROW.gguf").string() + "' -p hi");
  EXPECT_EQ(corrupt.exit_code, 4) << corrupt.err;
  CommandResult arch = run_command(qrun() + " run -q -m '" +
                                   data_path("vocab/ggml-vocab-gpt-2.gguf").string() + "' -p hi");
  EXPECT_EQ(arch.exit_code, 5) << arch.err;
  EXPECT_NE(arch.err.find("gpt2"), std::string::npos) << arch.err;
  CommandResult bad_flag = run_command(qrun() + " run --temp -1 -p hi");
  EXPECT_EQ(bad_flag.exit_code, 2);
  CommandResult no_prompt = run_command(qrun() + " run --no-stdin");
  EXPECT_EQ(no_prompt.exit_code, 2);
  EXPECT_NE(no_prompt.err.find("no prompt"), std::string::npos) << no_prompt.err;
  for (const CommandResult* r : {&overflow, &missing, &corrupt, &arch, &no_prompt}) {
    EXPECT_EQ(std::count(r->err.begin(), r->err.end(), '\n'), 1) << r->err;
  }
}

TEST(CliRun, SigintStopsCleanlyWithExitCode130) {
  const std::filesystem::path dir = temp_dir();
  const std::string model = (dir / "tiny.gguf").string();
  ASSERT_EQ(run_command(qrun() + " synth -o '" + model + "' --like tiny --ctx 65536").exit_code, 0);
  // A long generation, interrupted once it has started printing.
  CommandResult r =
      run_command("out='" + (dir / "out").string() + "'; " + qrun() + " run -m '" + model +
                  "' -c 65536 -n 60000 --temp 0 -p 'Once' >\"$out\" & pid=$!; "
                  "for i in $(seq 100); do [ -s \"$out\" ] && break; sleep 0.1; done; "
                  "kill -INT $pid; wait $pid; echo \"rc=$?\"; wc -c <\"$out\"");
  EXPECT_NE(r.out.find("rc=130"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("stop: interrupted"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace qrun::test
