// End-to-end tests of `qrun run` through the built binary: byte-exact greedy
// continuations against llama.cpp's, the scripting contract (stdout holds only the text,
// no escape bytes, piped stdin, --json), the sampling flags (seeds, stop strings, logit
// bias, --ignore-eos, one-line usage errors), documented exit codes, and SIGINT.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/sampling_flags.h"
#include "core/gguf/gguf.h"
#include "core/tokenizer/tokenizer.h"
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

// -p "" is an empty prompt, not a missing one: generation starts from BOS alone, as
// llama.cpp's does; a model that adds no BOS has nothing to start from (exit 2).
TEST(CliRun, EmptyPromptStartsFromBos) {
  CommandResult r = run_command(qrun() + " run -q --json --no-stdin --temp 0 -n 4 -m '" +
                                model_path("stories260K") + "' -p ''");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_tokens"], nlohmann::json::array({1}));
  EXPECT_EQ(j["n_tokens"], 4);

  const std::string no_bos = (temp_dir() / "no-bos.gguf").string();
  ASSERT_EQ(run_command(qrun() + " synth --arch qwen2 --like tiny --vocab '" +
                        data_path("vocab/ggml-vocab-gpt-2.gguf").string() + "' -o '" + no_bos + "'")
                .exit_code,
            0);
  CommandResult none = run_command(qrun() + " run --no-stdin -m '" + no_bos + "' -p ''");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("nothing to start from"), std::string::npos) << none.err;

  // Without -p, -f or stdin there is still no prompt.
  CommandResult missing = run_command(qrun() + " run --no-stdin -m '" + no_bos + "'");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("no prompt"), std::string::npos) << missing.err;
}

// The warm-up pass at load leaves nothing behind: the same text with and without it.
TEST(CliRun, WarmupDoesNotChangeTheOutput) {
  const std::string cmd = qrun() + " run -q --no-stdin --temp 0 -n 24 -m '" +
                          model_path("stories260K") + "' -p '" + kPark + "'";
  CommandResult warm = run_command(cmd);
  CommandResult cold = run_command(cmd + " --no-warmup");
  ASSERT_EQ(warm.exit_code, 0) << warm.err;
  ASSERT_EQ(cold.exit_code, 0) << cold.err;
  EXPECT_EQ(warm.out, cold.out);
  EXPECT_EQ(warm.out, golden("stories260K", "park")["greedy_text"].get<std::string>().substr(
                          0, warm.out.size()));
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

// -f names a directory: the error names the flag and the directory (it used to read as an
// empty prompt and say "no prompt").
TEST(CliRun, PromptFileThatIsADirectoryIsNamed) {
  const std::filesystem::path dir = temp_dir();
  const CommandResult r = run_command(qrun() + " run -q -n 4 -f '" + dir.string() + "'");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.err, "qrun: -f: '" + dir.string() + "' is a directory, not a regular file\n");
  EXPECT_TRUE(r.out.empty()) << r.out;
  std::filesystem::remove_all(dir);
}

// -t above the hardware's thread count starts that many threads, not thousands, and says so.
TEST(CliRun, ThreadsAreCappedAtTheHardwareThreadCount) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const CommandResult r = run_command(qrun() + " run --temp 0 -n 2 -p hi -t 100000");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string n = std::to_string(hw);
  EXPECT_NE(
      r.err.find("qrun: -t 100000: this machine runs " + n + " threads at once; using " + n + "\n"),
      std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("; " + n + " threads, "), std::string::npos) << r.err;  // the load line
  const CommandResult quiet = run_command(qrun() + " run -q --temp 0 -n 2 -p hi -t 100000");
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_TRUE(quiet.err.empty()) << quiet.err;
}

// The golden greedy tokens of `model`/`prompt`, first n, as text: each token's piece, as
// a stream decoder releases them.
std::string golden_text(const std::string& model, const std::string& prompt, size_t n) {
  const std::vector<int32_t> ids =
      golden(model, prompt)["greedy_tokens"].get<std::vector<int32_t>>();
  Result<gguf::File> f = gguf::File::open(model_path(model));
  EXPECT_TRUE(f.ok());
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*f);
  EXPECT_TRUE(tok.ok());
  TokenStreamDecoder decoder(**tok);
  std::string text;
  for (size_t i = 0; i < n && i < ids.size(); ++i) text += decoder.push(ids[i]);
  return text + decoder.flush();
}

TEST(CliRun, ShellPipelineReproducesTheGoldenGreedyText) {
  const std::string expected = golden_text("stories260K", "once", 20);
  ASSERT_EQ(expected, golden("stories260K", "once")["greedy_text"].get<std::string>().substr(
                          0, expected.size()));
  const std::string m = model_path("stories260K");
  CommandResult count = run_command("printf '%s' '" + std::string(kOnce) + "' | " + qrun() +
                                    " run -m '" + m + "' -n 20 --temp 0 | wc -c");
  ASSERT_EQ(count.exit_code, 0) << count.err;
  EXPECT_EQ(std::stoul(count.out), expected.size());
  CommandResult text = run_command("printf '%s' '" + std::string(kOnce) + "' | " + qrun() +
                                   " run -m '" + m + "' -n 20 --temp 0");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out, expected);
}

TEST(CliRun, NoEscapeBytesWhenNotATerminal) {
  for (const char* extra : {"", " --json", " --echo"}) {
    CommandResult r = run_command(qrun() + " run -n 40 -s 3 -m '" + model_path("stories260K") +
                                  "' -p '" + kOnce + "'" + extra);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(r.out.empty());
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << extra;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << extra;
  }
}

TEST(CliRun, StopStringCutsTheOutputAndReportsStop) {
  // Greedy: ", there was a little girl named Lily. ..."
  const std::string m = model_path("stories260K");
  const std::string base = qrun() + " run --temp 0 -n 48 -m '" + m + "' -p '" + kOnce + "'";
  CommandResult r = run_command(base + " --stop little");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, ", there was a ");
  EXPECT_NE(r.err.find("stop: stop"), std::string::npos) << r.err;
  // Spanning tokens, and the earliest of several.
  r = run_command(base + " -q --stop 'e was a l' --stop Lily");
  EXPECT_EQ(r.out, ", ther");
  // --json: the text without the stop string, the reason and the string; a stop string
  // that never appears changes nothing.
  r = run_command(base + " -q --json --stop 'named' --stop 'never there'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["text"], ", there was a little girl ");
  EXPECT_EQ(j["stop_reason"], "stop");
  EXPECT_EQ(j["stop_string"], "named");
  EXPECT_EQ(j["n_tokens"], j["tokens"].size());
  r = run_command(base + " -q --stop 'never there'");
  EXPECT_EQ(r.out, golden("stories260K", "once")["greedy_text"].get<std::string>());
  // Escapes are read: a newline stop string.
  r = run_command(qrun() + " run -q --temp 0 -n 200 -m '" + m + "' -p '" + kOnce +
                  "' --stop '\\n' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json nl = nlohmann::json::parse(r.out);
  EXPECT_EQ(nl["text"].get<std::string>().find('\n'), std::string::npos);
}

TEST(CliRun, SameSeedSameOutputDifferentSeedsDiffer) {
  const std::string base = qrun() + " run -q --json --temp 1 -n 40 -m '" +
                           model_path("stories260K") + "' -p '" + kOnce + "'";
  auto run = [&](const std::string& flags) {
    CommandResult r = run_command(base + flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
  };
  const nlohmann::json a = run(" -s 42");
  const nlohmann::json b = run(" --seed 42");
  const nlohmann::json c = run(" -s 43");
  EXPECT_EQ(a["tokens"], b["tokens"]);
  EXPECT_EQ(a["text"], b["text"]);
  EXPECT_NE(a["tokens"], c["tokens"]);
  EXPECT_EQ(a["seed"], 42);
  // A random seed is reported, and replaying it gives the same tokens.
  const nlohmann::json r = run("");
  EXPECT_EQ(run(" -s " + std::to_string(r["seed"].get<uint32_t>()))["tokens"], r["tokens"]);
  // Every sampler is seeded: mirostat and the penalties too.
  for (const char* flags : {" -s 5 --mirostat 2", " -s 5 --mirostat 1 --mirostat-ent 3",
                            " -s 5 --repeat-penalty 1.3 --presence-penalty 0.5 --typical 0.9"}) {
    SCOPED_TRACE(flags);
    const nlohmann::json x = run(flags);
    EXPECT_EQ(run(flags)["tokens"], x["tokens"]);
    EXPECT_EQ(x["tokens"].size(), 40u);
  }
}

TEST(CliRun, LogitBiasAndIgnoreEos) {
  const std::string base = qrun() + " run -q --json --temp 0 -n 30 -m '" +
                           model_path("stories260K") + "' -p '" + kOnce + "'";
  const int eos = 2;  // stories260K's </s>
  // Forcing EOS ends generation at once, with nothing emitted.
  CommandResult r = run_command(base + " --logit-bias " + std::to_string(eos) + "+100");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["stop_reason"], "eos");
  EXPECT_TRUE(j["tokens"].empty());
  // --ignore-eos bans it (-inf wins over +100): the budget runs out instead.
  r = run_command(base + " --logit-bias " + std::to_string(eos) + "+100 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["stop_reason"], "length");
  EXPECT_EQ(j["tokens"].size(), 30u);
  // Banning the first greedy token changes the first token.
  const int first = golden("stories260K", "once")["greedy_tokens"][0].get<int>();
  r = run_command(base + " --logit-bias " + std::to_string(first) + "-inf");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["tokens"][0].get<int>(), first);
}

TEST(CliRun, BadSamplingFlagValuesAreUsageErrorsNamingTheFlag) {
  const std::string m = model_path("stories260K");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--temp -1", "--temp"},
      {"--temp abc", "--temp"},
      {"--top-k -3", "--top-k"},
      {"--top-k 1.5", "--top-k"},
      {"--top-p 1.5", "--top-p"},
      {"--min-p -0.1", "--min-p"},
      {"--typical 2", "--typical"},
      {"--repeat-penalty 0", "--repeat-penalty"},
      {"--repeat-last-n -2", "--repeat-last-n"},
      {"--presence-penalty nan", "--presence-penalty"},
      {"--frequency-penalty x", "--frequency-penalty"},
      {"--mirostat 3", "--mirostat"},
      {"--mirostat-lr -1", "--mirostat-lr"},
      {"--mirostat-ent inf", "--mirostat-ent"},
      {"-s -5", "--seed"},
      {"--seed 4294967296", "--seed"},
      {"--logit-bias 12x", "--logit-bias"},
      {"--logit-bias 12+", "--logit-bias"},
      {"-q --logit-bias 99999+1", "--logit-bias"},  // checked once the vocabulary is loaded
      {"--stop ''", "--stop"},
  };
  for (const auto& [flags, name] : cases) {
    SCOPED_TRACE(flags);
    CommandResult r = run_command(qrun() + " run -m '" + m + "' -n 4 -p hi " + flags);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(name), std::string::npos) << r.err;
    EXPECT_EQ(r.err.rfind("qrun: ", 0), 0u) << r.err;
  }
}

TEST(CliRun, HelpListsSamplingFlagsAndExitCodes) {
  CommandResult r = run_command(qrun() + " run --help");
  ASSERT_EQ(r.exit_code, 0);
  for (const char* flag :
       {"--temp", "--top-k", "--top-p", "--min-p", "--typical", "--repeat-penalty",
        "--repeat-last-n", "--presence-penalty", "--frequency-penalty", "--mirostat",
        "--mirostat-lr", "--mirostat-ent", "--logit-bias", "--ignore-eos", "--stop", "--seed",
        "Exit codes", "130 interrupted"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

// The flag table in process, as the chat REPL's /set and /show use it.
TEST(SamplingFlags, SetDescribeAndResolve) {
  cli::SamplingFlags f;
  EXPECT_EQ(cli::describe_sampling_flags(f),
            "temp=0.8 top-k=40 top-p=0.95 min-p=0.05 typical=1 repeat-penalty=1 "
            "repeat-last-n=64 presence-penalty=0 frequency-penalty=0 mirostat=0 mirostat-lr=0.1 "
            "mirostat-ent=5 seed=-1 ignore-eos=false");
  ASSERT_TRUE(cli::set_sampling_flag(f, "temp", "0.2").ok());
  ASSERT_TRUE(cli::set_sampling_flag(f, "top-k", "7").ok());
  ASSERT_TRUE(cli::set_sampling_flag(f, "stop", "\\n\\n").ok());
  ASSERT_TRUE(cli::set_sampling_flag(f, "stop", "User:").ok());
  ASSERT_TRUE(cli::set_sampling_flag(f, "logit-bias", "5-inf").ok());
  ASSERT_TRUE(cli::set_sampling_flag(f, "ignore-eos", "on").ok());
  ASSERT_TRUE(cli::set_sampling_flag(f, "seed", "9").ok());
  EXPECT_FLOAT_EQ(f.params.temperature, 0.2f);
  EXPECT_EQ(f.stops, (std::vector<std::string>{"\n\n", "User:"}));
  const std::string shown = cli::describe_sampling_flags(f);
  EXPECT_NE(shown.find("temp=0.2 top-k=7 "), std::string::npos) << shown;
  EXPECT_NE(shown.find("seed=9 ignore-eos=true logit-bias=5-inf stop=\"\\n\\n\" stop=\"User:\""),
            std::string::npos)
      << shown;

  // Errors name the flag and leave the value alone; unknown keys are named too.
  Result<void> bad = cli::set_sampling_flag(f, "top-p", "2");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kUsage);
  EXPECT_EQ(bad.error().message, "--top-p 2: must be in [0, 1]");
  EXPECT_FLOAT_EQ(f.params.top_p, 0.95f);
  bad = cli::set_sampling_flag(f, "tempp", "1");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("tempp"), std::string::npos);

  // Resolving against a vocabulary: the seed, the biases, and -inf on every EOG token.
  Result<gguf::File> file = gguf::File::open(model_path("stories260K"));
  ASSERT_TRUE(file.ok());
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.ok());
  Result<SamplingParams> p = cli::resolve_sampling_params(f, **tok);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->seed, 9u);
  EXPECT_EQ(p->top_k, 7);
  ASSERT_GE(p->logit_bias.size(), 2u);
  EXPECT_EQ(p->logit_bias[0].token, 5);
  EXPECT_EQ(p->logit_bias[0].bias, -INFINITY);
  for (size_t i = 1; i < p->logit_bias.size(); ++i) {
    EXPECT_TRUE((*tok)->is_eog(p->logit_bias[i].token));
    EXPECT_EQ(p->logit_bias[i].bias, -INFINITY);
  }
  // Empty values clear the lists.
  ASSERT_TRUE(cli::set_sampling_flag(f, "stop", "").ok());
  ASSERT_TRUE(cli::set_sampling_flag(f, "logit-bias", "").ok());
  EXPECT_TRUE(f.stops.empty());
  EXPECT_TRUE(f.logit_bias.empty());
  ASSERT_TRUE(cli::set_sampling_flag(f, "logit-bias", "600+1").ok());
  p = cli::resolve_sampling_params(f, **tok);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("600"), std::string::npos);
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

// -ngl: 0 is the CPU; a bad count, and any GPU request this machine cannot honour (no
// CUDA in the build, or no device: the test machines have none), a split of the layers
// included, is a usage error naming the flag, before anything is loaded onto a device.
TEST(CliRun, GpuLayersFlag) {
  const std::string m = model_path("stories260K");
  CommandResult cpu = run_command(qrun() + " run -q --temp 0 -n 8 -ngl 0 -m '" + m + "' -p 'Once'");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  CommandResult bad = run_command(qrun() + " run -q -n 8 -ngl lots -m '" + m + "' -p 'Once'");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("lots"), std::string::npos) << bad.err;
  CommandResult split = run_command(qrun() + " run -q -n 8 -ngl 1 -m '" + m + "' -p 'Once'");
  EXPECT_EQ(split.exit_code, 2);
  EXPECT_NE(split.err.find("-ngl 1: "), std::string::npos) << split.err;
  EXPECT_EQ(std::count(split.err.begin(), split.err.end(), '\n'), 1) << split.err;
}

}  // namespace
}  // namespace qrun::test
