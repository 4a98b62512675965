// End-to-end tests of `qrun bench` through the built binary on tiny synthetic models:
// the JSON records (llama-bench's field names plus qrun's bandwidth fields), the Markdown
// table, `--memory` alone, `--no-memory-probe`, and the usage and context errors. Speeds are only
// checked to be positive and self-consistent, never against a threshold.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "core/gguf/gguf.h"
#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

std::string qrun() {
  return qrun_binary().string();
}

// "YYYY-MM-DDTHH:MM:SSZ", as llama-bench writes test_time.
bool is_iso8601_utc(const std::string& s) {
  const std::string shape = "dddd-dd-ddTdd:dd:ddZ";
  if (s.size() != shape.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool ok =
        shape[i] == 'd' ? std::isdigit(static_cast<unsigned char>(s[i])) != 0 : s[i] == shape[i];
    if (!ok) return false;
  }
  return true;
}

// A tiny synthetic model (demo vocabulary), tied to its embedding or not.
std::string synth_model(const std::filesystem::path& dir, bool tied) {
  const std::string out = (dir / (tied ? "tied.gguf" : "untied.gguf")).string();
  CommandResult r = run_command(qrun() + " synth -o '" + out + "' --like tiny --type q8_0" +
                                (tied ? " --tied" : ""));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return out;
}

// Weights read per decoded token, from the tensor table: everything but the embedding,
// plus one embedding row, or the whole embedding when it is also the output projection.
size_t expected_weight_bytes(const std::string& path) {
  Result<gguf::File> f = gguf::File::open(path);
  EXPECT_TRUE(f.ok());
  size_t total = 0;
  for (const gguf::TensorInfo& t : f->tensors()) total += t.n_bytes;
  const gguf::TensorInfo* embd = f->find_tensor("token_embd.weight");
  EXPECT_NE(embd, nullptr);
  if (f->find_tensor("output.weight") == nullptr) return total;
  return total - embd->n_bytes + embd->n_bytes / static_cast<size_t>(embd->ne[1]);
}

TEST(CliBench, JsonRecordsHaveLlamaBenchFieldsAndBandwidth) {
  const std::string model = synth_model(temp_dir(), /*tied=*/false);
  CommandResult r =
      run_command(qrun() + " bench -m '" + model + "' -p 16 -n 8 -r 2 -t 1,2 --json -b 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);  // stdout is only the JSON
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 4u) << r.out;  // (pp16, tg8) x (1, 2 threads)

  const size_t weight_bytes = expected_weight_bytes(model);
  for (size_t i = 0; i < j.size(); ++i) {
    SCOPED_TRACE(i);
    const nlohmann::json& rec = j[i];
    for (const char* key : {"model_filename", "model_type",  "model_size",
                            "model_n_params", "n_batch",     "n_threads",
                            "n_prompt",       "n_gen",       "test_time",
                            "avg_ns",         "stddev_ns",   "avg_ts",
                            "stddev_ts",      "samples_ns",  "samples_ts",
                            "backend",        "isa",         "weight_bytes_per_token",
                            "effective_gbps", "memory_gbps", "bandwidth_utilisation",
                            "memory_probe"}) {
      EXPECT_TRUE(rec.contains(key)) << key;
    }
    EXPECT_EQ(rec["model_filename"], model);
    EXPECT_EQ(rec["n_batch"], 8);
    EXPECT_EQ(rec["n_threads"], i < 2 ? 1 : 2);
    const bool tg = i % 2 == 1;
    EXPECT_EQ(rec["n_prompt"], tg ? 0 : 16);
    EXPECT_EQ(rec["n_gen"], tg ? 8 : 0);
    EXPECT_EQ(rec["backend"], "cpu");
    EXPECT_FALSE(rec["isa"].get<std::string>().empty());
    EXPECT_GT(rec["model_size"].get<int64_t>(), 0);
    EXPECT_GT(rec["model_n_params"].get<int64_t>(), 0);
    EXPECT_TRUE(is_iso8601_utc(rec["test_time"].get<std::string>())) << rec["test_time"];

    ASSERT_EQ(rec["samples_ns"].size(), 2u);
    ASSERT_EQ(rec["samples_ts"].size(), 2u);
    double sum_ts = 0.0;
    for (int k = 0; k < 2; ++k) {
      const double ns = rec["samples_ns"][k].get<double>();
      const double ts = rec["samples_ts"][k].get<double>();
      EXPECT_GT(ns, 0);
      EXPECT_NEAR(ts, (tg ? 8 : 16) * 1e9 / ns, 1e-6 * ts);
      sum_ts += ts;
    }
    EXPECT_NEAR(rec["avg_ts"].get<double>(), sum_ts / 2, 1e-9 * sum_ts);
    EXPECT_GT(rec["avg_ns"].get<int64_t>(), 0);
    EXPECT_GE(rec["stddev_ns"].get<int64_t>(), 0);
    EXPECT_GE(rec["stddev_ts"].get<double>(), 0.0);

    EXPECT_EQ(rec["weight_bytes_per_token"].get<size_t>(), weight_bytes);
    EXPECT_GT(rec["memory_gbps"].get<double>(), 0.0);  // measured because a tg test runs
    if (tg) {
      const double eff = rec["effective_gbps"].get<double>();
      EXPECT_NEAR(eff, static_cast<double>(weight_bytes) * rec["avg_ts"].get<double>() / 1e9,
                  1e-9 * eff);
      EXPECT_NEAR(rec["bandwidth_utilisation"].get<double>(),
                  eff / rec["memory_gbps"].get<double>(), 1e-9);
    } else {
      EXPECT_TRUE(rec["effective_gbps"].is_null());
      EXPECT_TRUE(rec["bandwidth_utilisation"].is_null());
    }
  }
}

TEST(CliBench, TiedEmbeddingCountsAsTheOutputMatmul) {
  const std::string model = synth_model(temp_dir(), /*tied=*/true);
  CommandResult r = run_command(qrun() + " bench -m '" + model + "' -p 0 -n 4 -r 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["n_gen"], 4);
  EXPECT_EQ(j[0]["weight_bytes_per_token"].get<size_t>(), expected_weight_bytes(model));
}

TEST(CliBench, MarkdownTableByDefault) {
  const std::string model = data_path("models/stories260K.gguf").string();
  CommandResult r = run_command(qrun() + " bench -m '" + model + "' -p 16,8 -n 8 -r 2 -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("| model ", 0), 0u) << r.out;  // the header row comes first
  for (const char* part : {" size |", " params |", "| backend ", " threads |", " test |", " t/s |",
                           " eff. GB/s |", " % mem |", "| ---", "---: |"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }
  for (const char* test : {" pp16 |", " pp8 |", " tg8 |"}) {  // right-aligned cells
    EXPECT_NE(r.out.find(test), std::string::npos) << test << r.out;
  }
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2 + 3 + 2) << r.out;
  EXPECT_NE(r.out.find("memory read bandwidth"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("bench tg8"), std::string::npos) << r.err;  // progress on stderr
}

// --no-memory-probe: no bandwidth measured (nothing on stderr about it), the JSON's roofline
// fields null and memory_probe false, the table without its "% mem" column and saying why.
TEST(CliBench, NoMemoryProbeLeavesTheRooflineOut) {
  const std::string model = data_path("models/stories260K.gguf").string();
  CommandResult js = run_command(qrun() + " bench -m '" + model +
                                 "' -p 8 -n 4 -r 1 -t 1 --json --no-memory-probe");
  ASSERT_EQ(js.exit_code, 0) << js.err;
  EXPECT_EQ(js.err.find("memory read"), std::string::npos) << js.err;
  const nlohmann::json j = nlohmann::json::parse(js.out);
  ASSERT_EQ(j.size(), 2u) << js.out;
  for (const nlohmann::json& rec : j) {
    EXPECT_TRUE(rec["memory_gbps"].is_null()) << rec;
    EXPECT_TRUE(rec["bandwidth_utilisation"].is_null()) << rec;
    EXPECT_EQ(rec["memory_probe"], false) << rec;
  }
  EXPECT_GT(j[1]["effective_gbps"].get<double>(), 0.0);  // weights x t/s needs no probe

  CommandResult md =
      run_command(qrun() + " bench -m '" + model + "' -p 0 -n 4 -r 1 -t 1 --no-memory-probe");
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_NE(md.out.find(" eff. GB/s |\n"), std::string::npos) << md.out;  // the last column
  EXPECT_EQ(md.out.find("% mem |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("memory bandwidth not measured (--no-memory-probe)"), std::string::npos)
      << md.out;
  EXPECT_EQ(md.out.find("memory read bandwidth"), std::string::npos) << md.out;

  CommandResult with = run_command(qrun() + " bench -m '" + model + "' -p 0 -n 4 -r 1 -t 1 --json");
  ASSERT_EQ(with.exit_code, 0) << with.err;
  EXPECT_EQ(nlohmann::json::parse(with.out)[0]["memory_probe"], true);

  CommandResult both = run_command(qrun() + " bench --memory --no-memory-probe -t 1");
  EXPECT_EQ(both.exit_code, 2) << both.err;
}

TEST(CliBench, MemoryAlonePrintsTheBandwidth) {
  CommandResult r = run_command(qrun() + " bench --memory -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string label = "memory read bandwidth: ";
  const size_t at = r.out.find(label);
  ASSERT_NE(at, std::string::npos) << r.out;
  size_t number_end = 0;
  const double gbps = std::stod(r.out.substr(at + label.size()), &number_end);
  EXPECT_GT(gbps, 0.0);
  const std::string unit = " GB/s with 1 thread";
  EXPECT_EQ(r.out.compare(at + label.size() + number_end, unit.size(), unit), 0) << r.out;

  CommandResult js = run_command(qrun() + " bench --memory --json -t 1");
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const nlohmann::json j = nlohmann::json::parse(js.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["n_threads"], 1);
  EXPECT_GT(j[0]["memory_gbps"].get<double>(), 0.0);
  EXPECT_GE(j[0]["passes"].get<int>(), 3);
}

// -d prefills before each run and names the test as llama-bench does; the cache types are
// in the record, and -c must hold the depth as well.
TEST(CliBench, DepthAndCacheTypes) {
  const std::string model = synth_model(temp_dir(), false);  // head size 16: f16, bf16, f32
  CommandResult r = run_command(qrun() + " bench -m '" + model +
                                "' -p 0 -n 4 -d 8 -r 1 -ctk bf16 -ctv f32 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["n_depth"], 8);
  EXPECT_EQ(j[0]["type_k"], "bf16");
  EXPECT_EQ(j[0]["type_v"], "f32");
  CommandResult md = run_command(qrun() + " bench -m '" + model + "' -p 0 -n 4 -d 8 -r 1");
  EXPECT_NE(md.out.find("tg4 @ d8"), std::string::npos) << md.out;
  CommandResult small = run_command(qrun() + " bench -m '" + model + "' -p 0 -n 4 -d 8 -c 10 -r 1");
  EXPECT_EQ(small.exit_code, 6) << small.err;
}

// With a drafter each tg test adds greedy rows without and with it. The model drafting for
// itself agrees with itself on every greedy token, so every drafted token is accepted and
// a target pass yields more than one token; prompt lookup drafts from the sequence; a
// draft of another vocabulary is refused before any test runs.
TEST(CliBench, DraftAddsGreedyAndSpeculativeRows) {
  const std::string model = data_path("models/stories260K.gguf").string();
  CommandResult r = run_command(qrun() + " bench -m '" + model + "' -md '" + model +
                                "' -p 0 -n 24 -r 2 -t 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u) << r.out;  // tg24, tg24 greedy, tg24 spec
  EXPECT_EQ(j[0]["tg_tokens"], "fixed");
  EXPECT_EQ(j[1]["tg_tokens"], "greedy");
  EXPECT_EQ(j[1]["n_drafted"], 0);
  EXPECT_EQ(j[1]["tokens_per_pass"], 1.0);
  EXPECT_EQ(j[2]["tg_tokens"], "greedy, speculative");
  EXPECT_GT(j[2]["n_drafted"].get<int64_t>(), 0);
  EXPECT_EQ(j[2]["n_accepted"], j[2]["n_drafted"]);
  EXPECT_GT(j[2]["tokens_per_pass"].get<double>(), 1.0);
  for (const nlohmann::json& rec : j) EXPECT_GT(rec["avg_ts"].get<double>(), 0.0);
  EXPECT_NE(r.err.find("tokens per target pass"), std::string::npos) << r.err;

  CommandResult md =
      run_command(qrun() + " bench -m '" + model + "' --lookup-ngram 2 -p 0 -n 24 -r 1 -t 1");
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_NE(md.out.find("tg24 greedy"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("tg24 spec"), std::string::npos) << md.out;

  const std::string other = data_path("models/TinyLLama-v0-5M-Q8_0.gguf").string();
  CommandResult mismatch =
      run_command(qrun() + " bench -m '" + model + "' -md '" + other + "' -p 0 -n 8 -r 1 -t 1");
  EXPECT_EQ(mismatch.exit_code, 5) << mismatch.err;
  EXPECT_TRUE(mismatch.out.empty()) << mismatch.out;
}

// -np decodes several sequences together: one row per count ("tgN xS"), n_parallel in the
// JSON, t/s over every sequence's tokens, and the effective bandwidth per batched pass
// (weights read once per step: bytes per token x t/s / S).
TEST(CliBench, ParallelDecodesSequencesTogether) {
  const std::string model = synth_model(temp_dir(), false);
  CommandResult r =
      run_command(qrun() + " bench -m '" + model + "' -p 0 -n 6 -np 1,3 -d 4 -r 1 -t 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u) << r.out;
  EXPECT_EQ(j[0]["n_parallel"], 1);
  EXPECT_EQ(j[1]["n_parallel"], 3);
  for (const nlohmann::json& rec : j) {
    EXPECT_EQ(rec["n_gen"], 6);
    const double ts = rec["avg_ts"].get<double>();
    EXPECT_GT(ts, 0.0);
    // t/s is the tokens of all the sequences over the time of the run.
    EXPECT_NEAR(ts, 6.0 * rec["n_parallel"].get<double>() * 1e9 / rec["avg_ns"].get<double>(),
                ts * 1e-3);
    EXPECT_NEAR(rec["effective_gbps"].get<double>(),
                static_cast<double>(rec["weight_bytes_per_token"].get<size_t>()) * ts /
                    rec["n_parallel"].get<double>() / 1e9,
                1e-9 + rec["effective_gbps"].get<double>() * 1e-9);
  }
  CommandResult md =
      run_command(qrun() + " bench -m '" + model + "' -p 0 -n 4 -np 2 -d 4 -r 1 -t 1");
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_NE(md.out.find("tg4 x2 @ d4"), std::string::npos) << md.out;
  for (const char* bad : {"-np 0", "-np 1,x", "-np 257"}) {
    CommandResult e = run_command(qrun() + " bench -m '" + model + "' -p 0 -n 4 -r 1 " + bad);
    EXPECT_EQ(e.exit_code, 2) << bad << ": " << e.err;
  }
}

// --kv-unified runs every test on sequences of one paged pool: a prompt, a decode and a
// batched decode of three sequences whose depth and tokens cross blocks of 16 rows (the
// pool holds them all at once), flagged in the JSON and under the table. A block size that
// is not a power of two, and a drafter (generate() decodes into a contiguous cache), are
// refused before the model loads.
TEST(CliBench, KvUnifiedPagesEveryCache) {
  const std::string model = synth_model(temp_dir(), false);
  CommandResult r =
      run_command(qrun() + " bench -m '" + model +
                  "' -p 40 -n 20 -np 1,3 -d 20 -r 2 -t 2 -kvu --block-size 16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u) << r.out;  // pp40, tg20, tg20 x3, each at depth 20
  for (const nlohmann::json& rec : j) {
    EXPECT_EQ(rec["kv_unified"], true);
    EXPECT_EQ(rec["n_depth"], 20);
    EXPECT_GT(rec["avg_ts"].get<double>(), 0.0);
  }
  EXPECT_EQ(j[2]["n_parallel"], 3);
  CommandResult md = run_command(qrun() + " bench -m '" + model + "' -p 8 -n 4 -r 1 -t 1 -kvu");
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_NE(md.out.find("KV cache paged (--kv-unified)"), std::string::npos) << md.out;
  CommandResult plain = run_command(qrun() + " bench -m '" + model + "' -p 8 -n 0 -r 1 --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(nlohmann::json::parse(plain.out)[0]["kv_unified"], false);
  for (const char* bad : {"-kvu --block-size 24", "-kvu --block-size 8", "-kvu --lookup-ngram 2"}) {
    CommandResult e = run_command(qrun() + " bench -m '" + model + "' -p 0 -n 4 -r 1 " + bad);
    EXPECT_EQ(e.exit_code, 2) << bad << ": " << e.err;
    EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << e.err;
  }
}

TEST(CliBench, BadInputIsAUsageOrContextError) {
  const std::string model = data_path("models/stories260K.gguf").string();
  for (const char* args : {"-p x", "-p -1", "-n 1,y", "-r 0", "-t 0", "--no-such-flag", "-p 0 -n 0",
                           "--cache-type q9"}) {
    SCOPED_TRACE(args);
    CommandResult r = run_command(qrun() + " bench -m '" + model + "' " + args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  CommandResult overflow = run_command(qrun() + " bench -m '" + model + "' -p 16 -n 8 -c 20 -r 1");
  EXPECT_EQ(overflow.exit_code, 6) << overflow.err;
  EXPECT_NE(overflow.err.find("context of 24 tokens"), std::string::npos) << overflow.err;
  EXPECT_EQ(std::count(overflow.err.begin(), overflow.err.end(), '\n'), 1) << overflow.err;

  CommandResult missing = run_command(qrun() + " bench -m /nonexistent/model.gguf -r 1");
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
}

}  // namespace
}  // namespace qrun::test
