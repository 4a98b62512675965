// The sampling flags: one table (names, help, a setter that parses and range-checks one
// value, a getter that prints it) drives CLI11, /set, /show and the --help defaults, so
// the command line and the REPL accept exactly the same values with the same messages.
#include "cli/sampling_flags.h"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>

#include "cli/text_file.h"
#include "core/grammar/grammar_stage.h"
#include "core/grammar/json_schema.h"

namespace qrun::cli {
namespace {

Error bad_value(std::string_view key, std::string_view value, const char* why) {
  return make_error(ErrorCode::kUsage,
                    format("--%.*s %.*s: %s", static_cast<int>(key.size()), key.data(),
                           static_cast<int>(value.size()), value.data(), why));
}

// A finite float, or (when allow_inf) also inf/-inf. The whole string must be consumed.
std::optional<float> parse_float(std::string_view value, bool allow_inf = false) {
  const std::string s(value);
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const float f = std::strtof(s.c_str(), &end);
  if (end != s.c_str() + s.size() || std::isnan(f)) return std::nullopt;
  if (std::isinf(f) && (!allow_inf || errno == ERANGE)) return std::nullopt;
  return f;
}

std::optional<int64_t> parse_int(std::string_view value) {
  int64_t v = 0;
  const char* first = value.data();
  const char* last = value.data() + value.size();
  if (first != last && *first == '+') ++first;
  const auto [ptr, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || ptr != last || first == last) return std::nullopt;
  return v;
}

// A float in [lo, hi]; `range` names the range in the message.
Result<void> set_float(float& out, std::string_view key, std::string_view value, float lo, float hi,
                       const char* range) {
  const std::optional<float> f = parse_float(value);
  if (!f) return bad_value(key, value, "expected a finite number");
  if (*f < lo || *f > hi) return bad_value(key, value, range);
  out = *f;
  return {};
}

Result<void> set_int(int32_t& out, std::string_view key, std::string_view value, int64_t lo,
                     int64_t hi, const char* range) {
  const std::optional<int64_t> i = parse_int(value);
  if (!i) return bad_value(key, value, "expected an integer");
  if (*i < lo || *i > hi) return bad_value(key, value, range);
  out = static_cast<int32_t>(*i);
  return {};
}

// Backslash escapes as in prompts: \n \r \t \\ \' \" \xHH; anything else stays as written.
std::string process_escapes(std::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '\\' || i + 1 == in.size()) {
      out += in[i];
      continue;
    }
    const char c = in[++i];
    switch (c) {
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case '\\':
      case '\'':
      case '"':
        out += c;
        break;
      case 'x':
        if (i + 2 < in.size() && std::isxdigit(static_cast<unsigned char>(in[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(in[i + 2]))) {
          out +=
              static_cast<char>(std::strtol(std::string(in.substr(i + 1, 2)).c_str(), nullptr, 16));
          i += 2;
          break;
        }
        [[fallthrough]];
      default:
        out += '\\';
        out += c;
    }
  }
  return out;
}

// The inverse, for describe: control bytes, backslash and quote become escapes; the rest
// (UTF-8 included) stays.
std::string escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f)
      out += format("\\x%02x", u);
    else
      out += c;
  }
  return out;
}

struct ParsedBias {
  int64_t token;
  float bias;
};

// "TOKEN+BIAS" or "TOKEN-BIAS"; BIAS may be inf ("15043-inf" bans the token).
std::optional<ParsedBias> parse_bias(std::string_view v) {
  const size_t sign = v.find_first_of("+-", 1);
  if (sign == std::string_view::npos) return std::nullopt;
  const std::optional<int64_t> token = parse_int(v.substr(0, sign));
  const std::string_view mag = v.substr(sign + 1);
  if (!token || *token < 0 || mag.empty() || mag[0] == '+' || mag[0] == '-') return std::nullopt;
  const std::optional<float> bias = parse_float(mag, /*allow_inf=*/true);
  if (!bias) return std::nullopt;
  return ParsedBias{*token, v[sign] == '-' ? -*bias : *bias};
}

std::string show_float(float f) {
  return format("%g", static_cast<double>(f));
}

// Parses `text` as the grammar; `flag` ("--grammar", "--grammar-file g.gbnf") leads errors.
Result<void> set_grammar(SamplingFlags& f, const std::string& flag, std::string_view text,
                         std::string_view file) {
  Result<Grammar> g = parse_grammar(text);
  if (!g.ok()) return make_error(ErrorCode::kUsage, flag + ": " + g.error().message);
  f.grammar = std::make_shared<const Grammar>(std::move(*g));
  f.grammar_file = std::string(file);
  return {};
}

// Converts a JSON Schema to the grammar; `flag` leads errors.
Result<void> set_schema(SamplingFlags& f, const std::string& flag, std::string_view schema) {
  Result<std::shared_ptr<const Grammar>> g = json_schema_grammar(schema);
  if (!g.ok()) return make_error(ErrorCode::kUsage, flag + ": " + g.error().message);
  f.grammar = std::move(*g);
  f.grammar_file.clear();
  return {};
}

using Setter = Result<void> (*)(SamplingFlags&, std::string_view key, std::string_view value);

// The grammar flags share this: an empty value removes the grammar, any other is handed
// to `load` (which parses it, or reads and parses a file).
using GrammarLoader = Result<void> (*)(SamplingFlags&, std::string_view value);
Result<void> set_or_clear_grammar(SamplingFlags& f, std::string_view value, GrammarLoader load) {
  if (!value.empty()) return load(f, value);
  f.grammar = nullptr;
  f.grammar_file.clear();
  return {};
}
using Getter = std::string (*)(const SamplingFlags&);

struct FlagSpec {
  const char* cli_names;  // as CLI11 declares them
  const char* key;        // the long name without dashes
  const char* type_name;  // for --help
  const char* help;
  Setter set;
  Getter get;
  bool repeatable = false;
  const char* grammar_flag = nullptr;  // for the grammar flags: the name errors show
};

constexpr float kBig = 1e30f;

const FlagSpec kFlags[] = {
    {"--temp", "temp", "T", "Temperature; 0 picks the most likely token (greedy)",
     [](SamplingFlags& f, std::string_view k, std::string_view v) {
       return set_float(f.params.temperature, k, v, 0.0f, kBig, "must be >= 0");
     },
     [](const SamplingFlags& f) { return show_float(f.params.temperature); }},
    {"--top-k", "top-k", "N", "Keep the N most likely tokens (0: all)",
     [](SamplingFlags& f, std::string_view k, std::string_view v) {
       return set_int(f.params.top_k, k, v, 0, INT32_MAX, "must be >= 0");
     },
     [](const SamplingFlags& f) { return std::to_string(f.params.top_k); }},
    {"--top-p", "top-p", "P", "Keep the most likely tokens up to probability mass P (1: off)",
     [](SamplingFlags& f, std::string_view k, std::string_view v) {
       return set_float(f.params.top_p, k, v, 0.0f, 1.0f, "must be in [0, 1]");
     },
     [](const SamplingFlags& f) { return show_float(f.params.top_p); }},
    {"--min-p", "min-p", "P", "Drop tokens less likely than P times the most likely (0: off)",
     [](SamplingFlags& f, std::string_view k, std::string_view v) {
       return set_float(f.params.min_p, k, v, 0.0f, 1.0f, "must be in [0, 1]");
     },
     [](const SamplingFlags& f) { return show_float(f.params.min_p); }},
    {"--typical", "typical", "P", "Locally typical sampling with mass P (1: off)",
     [](SamplingFlags& f, std::string_view k, std::string_view v) {
       return set_float(f.params.typical_p, k, v, 0.0f, 1.0f, "must be in [0, 1]");
     },
     [](const SamplingFlags& f) { return show_float(f.params.typical_p); }},
    {"--repeat-penalty", "repeat-penalty", "X",
     "Penalize tokens among the last --repeat-last-n (1: off)",
     [](SamplingFlags& f, std::string_view k, std::string_view v) {
       const std::optional<float> x = parse_float(v);
       if (!x) return Result<void>(bad_value(k, v, "expected a finite number"));
       if (*x <= 0.0f) return Result<void>(bad_value(k, v, "must be > 0"));
       f.params.repeat_penalty = *x;
       return Result<void>();
     },
     [](const SamplingFlags& f) { return show_float(f.params.repeat_penalty); }},
    {"--repeat-last-n", "repeat-last-n", "N",
     "How many recent tokens the penalties look at (0: off, -1: the context)",
     [](SamplingFlags& f, std::string_view k, std::string_view v) {
       return set_int(f.params.repeat_last_n, k, v, -1, INT32_MAX, "must be >= -1");
     },
     [](const SamplingFlags& f) { return std::to_string(f.params.repeat_last_n); }},
    {"--presence-penalty", "presence-penalty", "X",
     "Subtract X from tokens seen in the window (0: off)",
     [](SamplingFlags& f, std::string_view k, std::string_view v) {
       return set_float(f.params.presence_penalty, k, v, -kBig, kBig, "out of range");
     },
     [](const SamplingFlags& f) { return show_float(f.params.presence_penalty); }},
    {"--frequency-penalty", "frequency-penalty", "X",
     "Subtract X times the count of tokens seen in the window (0: off)",
     [](SamplingFlags& f, std::string_view k, std::string_view v) {
       return set_float(f.params.frequency_penalty, k, v, -kBig, kBig, "out of range");
     },
     [](const SamplingFlags& f) { return show_float(f.params.frequency_penalty); }},
    {"--mirostat", "mirostat", "{0,1,2}",
     "Mirostat sampling (1: v1, 2: v2), replacing top-k/typical/top-p/min-p",
     [](SamplingFlags& f, std::string_view k, std::string_view v) {
       return set_int(f.params.mirostat, k, v, 0, 2, "must be 0, 1 or 2");
     },
     [](const SamplingFlags& f) { return std::to_string(f.params.mirostat); }},
    {"--mirostat-lr", "mirostat-lr", "ETA", "Mirostat learning rate",
     [](SamplingFlags& f, std::string_view k, std::string_view v) {
       return set_float(f.params.mirostat_lr, k, v, 0.0f, kBig, "must be >= 0");
     },
     [](const SamplingFlags& f) { return show_float(f.params.mirostat_lr); }},
    {"--mirostat-ent", "mirostat-ent", "TAU", "Mirostat target entropy (surprise, in bits)",
     [](SamplingFlags& f, std::string_view k, std::string_view v) {
       return set_float(f.params.mirostat_ent, k, v, 0.0f, kBig, "must be >= 0");
     },
     [](const SamplingFlags& f) { return show_float(f.params.mirostat_ent); }},
    {"-s,--seed", "seed", "N", "Random seed (-1: a random one, printed on stderr)",
     [](SamplingFlags& f, std::string_view k, std::string_view v) {
       const std::optional<int64_t> s = parse_int(v);
       if (!s) return Result<void>(bad_value(k, v, "expected an integer"));
       if (*s < -1 || *s > int64_t{UINT32_MAX}) {
         return Result<void>(bad_value(k, v, "must be -1 or in [0, 4294967295]"));
       }
       f.seed = *s;
       return Result<void>();
     },
     [](const SamplingFlags& f) { return std::to_string(f.seed); }},
    {"--logit-bias", "logit-bias", "TOKEN(+|-)BIAS",
     "Add BIAS to a token's logit, e.g. 15043+1 or 15043-inf (repeatable)",
     [](SamplingFlags& f, std::string_view k, std::string_view v) {
       if (v.empty()) {
         f.logit_bias.clear();
         return Result<void>();
       }
       if (!parse_bias(v)) return Result<void>(bad_value(k, v, "expected TOKEN_ID(+|-)BIAS"));
       f.logit_bias.emplace_back(v);
       return Result<void>();
     },
     nullptr, true},
    {"--stop", "stop", "STRING",
     "Stop before STRING; \\n, \\t, \\xHH escapes are read (repeatable)",
     [](SamplingFlags& f, std::string_view, std::string_view v) {
       if (v.empty()) {
         f.stops.clear();
       } else {
         f.stops.push_back(process_escapes(v));
       }
       return Result<void>();
     },
     nullptr, true},
    {"--ignore-eos", "ignore-eos", "", "Never stop at end-of-generation tokens (never sample them)",
     [](SamplingFlags& f, std::string_view k, std::string_view v) {
       if (v.empty() || v == "1" || v == "true" || v == "on") {
         f.ignore_eos = true;
       } else if (v == "0" || v == "false" || v == "off") {
         f.ignore_eos = false;
       } else {
         return Result<void>(bad_value(k, v, "expected true or false"));
       }
       return Result<void>();
     },
     [](const SamplingFlags& f) { return std::string(f.ignore_eos ? "true" : "false"); }},
    {"--grammar", "grammar", "TEXT", "Constrain the output to a GBNF grammar (llama.cpp's syntax)",
     [](SamplingFlags& f, std::string_view, std::string_view v) {
       return set_or_clear_grammar(f, v, [](SamplingFlags& g, std::string_view text) {
         return set_grammar(g, "--grammar", text, "");
       });
     },
     nullptr, false, "--grammar"},
    {"--grammar-file", "grammar-file", "FILE", "Constrain the output to the GBNF grammar in FILE",
     [](SamplingFlags& f, std::string_view, std::string_view v) {
       return set_or_clear_grammar(f, v, [](SamplingFlags& g, std::string_view file) {
         const std::string path(file);
         Result<std::string> text = read_text_file("--grammar-file", path);
         if (!text.ok()) return Result<void>(text.error());
         return set_grammar(g, "--grammar-file " + path, *text, path);
       });
     },
     nullptr, false, "--grammar-file"},
    {"-j,--json-schema", "json-schema", "SCHEMA",
     "Constrain the output to JSON valid under a JSON Schema (a subset; see README)",
     [](SamplingFlags& f, std::string_view, std::string_view v) {
       return set_or_clear_grammar(f, v, [](SamplingFlags& g, std::string_view schema) {
         return set_schema(g, "--json-schema", schema);
       });
     },
     nullptr, false, "-j/--json-schema"},
    {"--json-schema-file", "json-schema-file", "FILE",
     "Constrain the output to JSON valid under the JSON Schema in FILE (also -jf)",
     [](SamplingFlags& f, std::string_view, std::string_view v) {
       return set_or_clear_grammar(f, v, [](SamplingFlags& g, std::string_view file) {
         const std::string path(file);
         Result<std::string> text = read_text_file("--json-schema-file", path);
         if (!text.ok()) return Result<void>(text.error());
         return set_schema(g, "--json-schema-file " + path, *text);
       });
     },
     nullptr, false, "-jf/--json-schema-file"},
};

void record(SamplingFlags& flags, Result<void> r) {
  if (!r.ok() && !flags.error) flags.error = r.error();
}

// The grammar options of one command and the names errors give them.
using GrammarOptions = std::vector<std::pair<const CLI::Option*, const char*>>;

// kUsage naming the first two when more than one grammar flag was given.
Result<void> one_grammar_flag(const GrammarOptions& options) {
  std::vector<const char*> given;
  for (const auto& [opt, name] : options) {
    if (opt->count() > 0) given.push_back(name);
  }
  if (given.size() < 2) return {};
  return make_error(ErrorCode::kUsage, format("%s and %s cannot be given together (give one "
                                              "grammar flag)",
                                              given[0], given[1]));
}

void add_flags(CLI::App* cmd, SamplingFlags& flags, bool grammar_only) {
  const SamplingFlags defaults;
  auto grammar_opts = std::make_shared<GrammarOptions>();
  for (const FlagSpec& spec : kFlags) {
    if (grammar_only && spec.grammar_flag == nullptr) continue;
    const std::string key = spec.key;
    const Setter set = spec.set;
    CLI::Option* opt = nullptr;
    if (spec.type_name[0] == '\0') {  // a plain flag
      opt = cmd->add_flag_callback(
          spec.cli_names, [&flags, key, set] { record(flags, set(flags, key, "")); }, spec.help);
    } else if (spec.repeatable) {
      opt =
          cmd->add_option_function<std::vector<std::string>>(
                 spec.cli_names,
                 [&flags, key, set](const std::vector<std::string>& values) {
                   for (const std::string& v : values) {
                     // An empty value on the command line is a mistake, not "clear".
                     record(flags, v.empty() ? Result<void>(make_error(
                                                   ErrorCode::kUsage, "--" + key + ": empty value"))
                                             : set(flags, key, v));
                   }
                 },
                 spec.help)
              ->allow_extra_args(false)
              ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    } else {
      const bool is_grammar = spec.grammar_flag != nullptr;
      opt = cmd->add_option_function<std::string>(
                   spec.cli_names,
                   [&flags, key, set, is_grammar, grammar_opts](const std::string& v) {
                     // Checked before the value is read, so that this error comes first.
                     if (is_grammar && !flags.error) {
                       Result<void> one = one_grammar_flag(*grammar_opts);
                       if (!one.ok()) return record(flags, one);
                     }
                     record(flags, set(flags, key, v));
                   },
                   spec.help)
                ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      if (spec.get != nullptr) opt->default_str(spec.get(defaults));
    }
    if (spec.grammar_flag != nullptr) grammar_opts->emplace_back(opt, spec.grammar_flag);
    opt->group(grammar_only ? "Grammar" : "Sampling");
    if (spec.type_name[0] != '\0') opt->type_name(spec.type_name);
  }
}

}  // namespace

void add_sampling_flags(CLI::App* cmd, SamplingFlags& flags) {
  add_flags(cmd, flags, /*grammar_only=*/false);
}

void add_grammar_flags(CLI::App* cmd, SamplingFlags& flags) {
  add_flags(cmd, flags, /*grammar_only=*/true);
}

Result<void> set_sampling_flag(SamplingFlags& flags, std::string_view key, std::string_view value) {
  for (const FlagSpec& spec : kFlags) {
    if (key == spec.key) return spec.set(flags, key, value);
  }
  return make_error(ErrorCode::kUsage, format("unknown sampling setting '%.*s'",
                                              static_cast<int>(key.size()), key.data()));
}

std::string describe_sampling_flags(const SamplingFlags& flags) {
  std::string out;
  auto add = [&out](std::string_view key, const std::string& value) {
    if (!out.empty()) out += ' ';
    out += key;
    out += '=';
    out += value;
  };
  for (const FlagSpec& spec : kFlags) {
    if (spec.get != nullptr) add(spec.key, spec.get(flags));
  }
  for (const std::string& b : flags.logit_bias) add("logit-bias", b);
  for (const std::string& s : flags.stops) add("stop", "\"" + escape(s) + "\"");
  // An inline --grammar is not shown (it would not read back through /set's quoting).
  if (!flags.grammar_file.empty()) add("grammar-file", "\"" + escape(flags.grammar_file) + "\"");
  return out;
}

Result<SamplingParams> resolve_sampling_params(const SamplingFlags& flags,
                                               const Tokenizer& tokenizer) {
  if (flags.error) return *flags.error;
  SamplingParams p = flags.params;
  p.seed = flags.seed >= 0 ? static_cast<uint32_t>(flags.seed) : std::random_device{}();
  p.logit_bias.clear();
  const int32_t n_vocab = tokenizer.n_vocab();
  for (const std::string& raw : flags.logit_bias) {
    const std::optional<ParsedBias> b = parse_bias(raw);
    if (!b) return bad_value("logit-bias", raw, "expected TOKEN_ID(+|-)BIAS");
    if (b->token >= n_vocab) {
      return make_error(ErrorCode::kUsage,
                        format("--logit-bias %s: token %lld is out of range (the vocabulary has "
                               "%d tokens)",
                               raw.c_str(), static_cast<long long>(b->token), n_vocab));
    }
    p.logit_bias.push_back(LogitBias{static_cast<int32_t>(b->token), b->bias});
  }
  if (flags.ignore_eos) {
    for (int32_t id = 0; id < n_vocab; ++id) {
      if (tokenizer.is_eog(id)) p.logit_bias.push_back(LogitBias{id, -INFINITY});
    }
  }
  return p;
}

Result<std::shared_ptr<const Grammar>> json_schema_grammar(std::string_view schema) {
  Result<std::string> gbnf = json_schema_to_grammar(schema);
  if (!gbnf.ok()) return gbnf.error();
  Result<Grammar> g = parse_grammar(*gbnf);
  QRUN_CHECK(g.ok(), "the grammar made from a JSON schema does not parse: %s\n%s",
             g.error().message.c_str(), gbnf->c_str());
  return std::shared_ptr<const Grammar>(std::make_shared<const Grammar>(std::move(*g)));
}

std::shared_ptr<const GrammarVocab> make_tokenizer_grammar_vocab(const Tokenizer& tokenizer) {
  std::vector<std::string> pieces(static_cast<size_t>(tokenizer.n_vocab()));
  for (int32_t id = 0; id < tokenizer.n_vocab(); ++id) {
    pieces[static_cast<size_t>(id)] = tokenizer.token_to_piece(id, /*render_special=*/false);
  }
  // Token elements written as text (<think>) are the tokens the text encodes to.
  return make_grammar_vocab(std::move(pieces), [&tokenizer](std::string_view text) {
    return tokenizer.encode(std::string(text), /*add_special=*/false, /*parse_special=*/true);
  });
}

Result<void> attach_grammar(const SamplingFlags& flags, const Tokenizer& tokenizer,
                            std::shared_ptr<const GrammarVocab>& vocab, Sampler& sampler) {
  if (flags.grammar == nullptr) return {};
  if (vocab == nullptr) vocab = make_tokenizer_grammar_vocab(tokenizer);
  const int32_t n_vocab = tokenizer.n_vocab();
  std::vector<uint8_t> is_eog(static_cast<size_t>(n_vocab), 0);
  for (int32_t id = 0; id < n_vocab; ++id) {
    is_eog[static_cast<size_t>(id)] = tokenizer.is_eog(id) ? 1 : 0;
  }
  Result<std::unique_ptr<ConstraintStage>> stage =
      make_grammar_stage(flags.grammar, vocab, std::move(is_eog));
  if (!stage.ok()) return stage.error();
  sampler.set_constraint(std::move(*stage));
  return {};
}

}  // namespace qrun::cli
