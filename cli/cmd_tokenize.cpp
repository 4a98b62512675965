// `qrun tokenize -m MODEL (-p TEXT | -f FILE | --stdin) [--ids] [--no-bos] [--no-parse-special]
// [--no-escape] [--show-count]`, with llama-tokenize's semantics: escapes (\n, \t, \xHH, ...)
// in the prompt are processed, special tokens are parsed and BOS is added when the model
// asks for it; the output is one "id -> 'piece'" line per token, or [1, 2, 3] with --ids.
#include <cstdio>

#include "cli/commands.h"
#include "cli/text_file.h"
#include "core/tokenizer/tokenizer.h"

namespace qrun::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string prompt;
  std::string file;
  bool from_stdin = false;
  bool ids = false;
  bool no_bos = false;
  bool no_parse_special = false;
  bool no_escape = false;
  bool show_count = false;
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Backslash escapes as llama.cpp's tools read them: \n \r \t \' \" \\ and \xHH (exactly two
// hex digits); any other backslash is kept as written.
std::string process_escapes(const std::string& in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '\\' || i + 1 >= in.size()) {
      out.push_back(in[i]);
      continue;
    }
    const char c = in[++i];
    switch (c) {
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case '\'':
      case '"':
      case '\\':
        out.push_back(c);
        break;
      default:
        if (c == 'x' && i + 2 < in.size() && hex_digit(in[i + 1]) >= 0 &&
            hex_digit(in[i + 2]) >= 0) {
          out.push_back(static_cast<char>(hex_digit(in[i + 1]) * 16 + hex_digit(in[i + 2])));
          i += 2;
        } else {
          out.push_back('\\');
          out.push_back(c);
        }
    }
  }
  return out;
}

Result<std::string> read_prompt(const TokenizeOptions& o, bool prompt_given) {
  const int sources = int{prompt_given} + int{!o.file.empty()} + int{o.from_stdin};
  if (sources > 1) {
    return make_error(ErrorCode::kUsage, "tokenize: -p, -f and --stdin are mutually exclusive");
  }
  if (!o.file.empty()) return read_text_file("-f", o.file);
  if (o.from_stdin) {
    return read_text_stdin("--stdin");
  }
  return o.prompt;
}

Result<void> run_tokenize(const TokenizeOptions& o, bool prompt_given) {
  if (o.model.empty())
    return make_error(ErrorCode::kUsage, "tokenize: no model given (-m MODEL.gguf)");
  if (!prompt_given && o.file.empty() && !o.from_stdin) {
    return make_error(ErrorCode::kUsage, "tokenize: no prompt given (-p TEXT, -f FILE or --stdin)");
  }
  Result<gguf::File> file = open_gguf("-m", o.model);
  if (!file) return file.error();
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*file);
  if (!tok) return tok.error();
  for (const std::string& w : (*tok)->warnings())
    std::fprintf(stderr, "qrun: warning: %s\n", w.c_str());

  Result<std::string> prompt = read_prompt(o, prompt_given);
  if (!prompt) return prompt.error();
  const std::string text = o.no_escape ? *prompt : process_escapes(*prompt);
  // As llama-tokenize: BOS (and with it any EOS) only when the model asks for it.
  const bool add_special = (*tok)->add_bos() && !o.no_bos;
  const std::vector<int32_t> ids = (*tok)->encode(text, add_special, !o.no_parse_special);

  if (o.ids) {
    std::string line = "[";
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? ", " : "") + std::to_string(ids[i]);
    std::printf("%s]\n", line.c_str());
  } else {
    for (const int32_t id : ids) {
      std::printf("%6d -> '%s'\n", id, (*tok)->token_to_piece(id, true).c_str());
    }
  }
  if (o.show_count) std::printf("Total number of tokens: %zu\n", ids.size());
  return {};
}

}  // namespace

void register_tokenize(CLI::App& app, Action* selected) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd =
      app.add_subcommand("tokenize", "Print the tokens of a prompt (as llama-tokenize)");
  add_file_option(cmd, "-m,--model", o->model, "GGUF file whose tokenizer to use");
  CLI::Option* prompt = cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
  add_file_option(cmd, "-f,--file", o->file, "Read the prompt from a file");
  cmd->add_flag("--stdin", o->from_stdin, "Read the prompt from standard input");
  cmd->add_flag("--ids", o->ids, "Print only the ids, as [1, 2, 3]");
  cmd->add_flag("--no-bos", o->no_bos, "Never add BOS, even if the model asks for it");
  cmd->add_flag("--no-parse-special", o->no_parse_special,
                "Do not recognise control tokens written in the prompt");
  cmd->add_flag("--no-escape", o->no_escape, "Do not process escapes (\\n, \\t, \\xHH, ...)");
  cmd->add_flag("--show-count", o->show_count, "Print the number of tokens at the end");
  cmd->callback([o, prompt, selected] {
    const bool prompt_given = prompt->count() > 0;
    *selected = [o, prompt_given] { return run_tokenize(*o, prompt_given); };
  });
}

}  // namespace qrun::cli
