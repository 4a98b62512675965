// Loading a tokenizer from tokenizer.ggml.* metadata, with llama.cpp's defaults and fix-ups:
// per-model default special ids, flags implied by the pre-tokenizer, end-of-generation and
// FIM tokens recognised by their text, and the phi-3 / jina-v2 white-space stripping rules.
// Every malformed value is an Error naming the file and key; oddities that llama.cpp
// tolerates become warnings.
#include <algorithm>
#include <cctype>

#include "core/tokenizer/tokenizer_vocab.h"

namespace qrun::tokenizer {
namespace {

// GGUF token types (tokenizer.ggml.token_type) to attribute bits.
uint32_t attr_from_token_type(int64_t type) {
  switch (type) {
    case 1:
      return kAttrNormal;
    case 2:
      return kAttrUnknown;
    case 3:
      return kAttrControl;
    case 4:
      return kAttrUserDefined;
    case 5:
      return kAttrUnused;
    case 6:
      return kAttrByte;
    default:
      return kAttrUndefined;
  }
}

Result<void> set_model_defaults(const gguf::File& file, Vocab& v) {
  if (v.model == "llama") {
    v.type = TokenizerType::kSpm;
    v.bos = 1;
    v.eos = 2;
    v.unk = 0;
    v.add_space_prefix = true;
    v.add_bos = true;
    return {};
  }
  if (v.model == "bert") {
    v.type = TokenizerType::kWpm;
    v.bos = 101;  // [CLS]
    v.unk = 100;
    v.sep = 102;
    v.pad = 0;
    v.mask = 103;
    v.add_bos = true;
    v.clean_spaces = true;
    return {};
  }
  if (v.model == "gpt2") {
    v.type = TokenizerType::kBpe;
    v.bos = 11;
    v.eos = 11;
    v.clean_spaces = true;
    return {};
  }
  if (v.model == "no_vocab" || v.model == "none") {
    return file.error(ErrorCode::kUnsupported,
                      "the model has no vocabulary (tokenizer.ggml.model is '" + v.model + "')");
  }
  return file.error(ErrorCode::kUnsupported,
                    "tokenizer model '" + v.model + "' is not supported (llama, gpt2, bert are)");
}

Result<void> set_pre_tokenizer(const gguf::File& file, Vocab& v) {
  Result<std::string> pre = file.get_string_or("tokenizer.ggml.pre", "");
  if (!pre) return pre.error();
  if (v.type != TokenizerType::kBpe) return {};
  const PreTokenizer* info = nullptr;
  if (pre->empty()) {
    v.warnings.push_back("tokenizer.ggml.pre is missing; using the 'default' pre-tokenizer");
  } else if ((info = find_pre_tokenizer(*pre)) != nullptr) {
    v.pre = *pre;
  } else {
    v.warnings.push_back("unknown pre-tokenizer '" + *pre +
                         "'; using 'default' (token ids may differ from the model's own)");
  }
  if (info == nullptr) info = find_pre_tokenizer("default");
  v.clean_spaces = info->clean_spaces;
  v.ignore_merges = info->ignore_merges;
  if (info->add_bos) v.add_bos = true;
  if (info->no_bos) v.bos = kNoToken;
  for (const char* pattern : info->patterns)
    v.pre_patterns.push_back(SplitPattern::compile(pattern));
  return {};
}

Result<void> read_tokens(const gguf::File& file, Vocab& v) {
  Result<std::vector<std::string>> texts = file.get_string_array("tokenizer.ggml.tokens");
  if (!texts) return texts.error();
  const size_t n = texts->size();
  if (n == 0 || n > static_cast<size_t>(INT32_MAX)) {
    return file.error(ErrorCode::kFormat, format("key 'tokenizer.ggml.tokens' has %zu tokens", n));
  }
  std::vector<float> scores;
  if (file.find("tokenizer.ggml.scores")) {
    Result<std::vector<float>> s = file.get_float_array("tokenizer.ggml.scores");
    if (!s) return s.error();
    scores = std::move(*s);
    if (scores.size() != n) {
      return file.error(
          ErrorCode::kFormat,
          format("key 'tokenizer.ggml.scores' has %zu entries for %zu tokens", scores.size(), n));
    }
  }
  std::vector<int64_t> types;
  if (file.find("tokenizer.ggml.token_type")) {
    Result<std::vector<int64_t>> t = file.get_int_array("tokenizer.ggml.token_type");
    if (!t) return t.error();
    types = std::move(*t);
    if (types.size() != n) {
      return file.error(ErrorCode::kFormat,
                        format("key 'tokenizer.ggml.token_type' has %zu entries for %zu tokens",
                               types.size(), n));
    }
  }
  v.tokens.resize(n);
  v.text_to_id.reserve(n);
  size_t duplicates = 0;
  for (size_t i = 0; i < n; ++i) {
    TokenData& t = v.tokens[i];
    t.text = std::move((*texts)[i]);
    if (t.text.empty()) {
      v.warnings.push_back(format("token %zu is empty; named [EMPTY_%zu]", i, i));
      t.text = format("[EMPTY_%zu]", i);
    }
    t.score = scores.empty() ? 0.0f : scores[i];
    t.attr = types.empty() ? kAttrNormal : attr_from_token_type(types[i]);
    auto [it, inserted] = v.text_to_id.insert_or_assign(t.text, static_cast<int32_t>(i));
    duplicates += inserted ? 0 : 1;
    v.max_token_len = std::max(v.max_token_len, t.text.size());
  }
  if (duplicates) {
    v.warnings.push_back(
        format("%zu token texts appear more than once; the last id wins", duplicates));
  }
  return {};
}

Result<void> read_merges(const gguf::File& file, Vocab& v) {
  if (v.type != TokenizerType::kBpe) return {};
  Result<std::vector<std::string>> merges = file.get_string_array("tokenizer.ggml.merges");
  if (!merges) return merges.error();
  v.bpe_ranks.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string_view merge = (*merges)[i];
    // "left right", split at the first space after the first byte (a merge without one
    // pairs two empty strings and can never apply).
    const size_t space = merge.find(' ', 1);
    const std::string key = space == std::string_view::npos
                                ? merge_key("", "")
                                : merge_key(merge.substr(0, space), merge.substr(space + 1));
    v.bpe_ranks.emplace(key, static_cast<int32_t>(i));  // the first rank of a pair wins
  }
  return {};
}

Result<void> read_special_ids(const gguf::File& file, Vocab& v) {
  const std::pair<const char*, int32_t*> keys[] = {
      {"tokenizer.ggml.bos_token_id", &v.bos},
      {"tokenizer.ggml.eos_token_id", &v.eos},
      {"tokenizer.ggml.eot_token_id", &v.eot},
      {"tokenizer.ggml.eom_token_id", &v.eom},
      {"tokenizer.ggml.unknown_token_id", &v.unk},
      {"tokenizer.ggml.seperator_token_id", &v.sep},
      {"tokenizer.ggml.padding_token_id", &v.pad},
      {"tokenizer.ggml.mask_token_id", &v.mask},
      {"tokenizer.ggml.fim_pre_token_id", &v.fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &v.fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &v.fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &v.fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &v.fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &v.fim_sep},
      {"tokenizer.ggml.prefix_token_id", &v.fim_pre},  // deprecated spellings
      {"tokenizer.ggml.suffix_token_id", &v.fim_suf},
      {"tokenizer.ggml.middle_token_id", &v.fim_mid},
  };
  const int64_t n = static_cast<int64_t>(v.tokens.size());
  for (const auto& [key, id] : keys) {
    if (!file.find(key)) continue;
    Result<int64_t> value = file.get_int(key);
    if (!value) return value.error();
    if (*value >= 0 && *value < n) {
      *id = static_cast<int32_t>(*value);
    } else if (*value != -1 && *value != 0xFFFFFFFF) {  // both spell "none"
      v.warnings.push_back(format("%s = %lld is out of range; keeping the default", key,
                                  static_cast<long long>(*value)));
    }
  }
  Result<bool> add_bos = file.get_bool_or("tokenizer.ggml.add_bos_token", v.add_bos);
  if (!add_bos) return add_bos.error();
  Result<bool> add_eos = file.get_bool_or("tokenizer.ggml.add_eos_token", v.add_eos);
  if (!add_eos) return add_eos.error();
  Result<bool> prefix = file.get_bool_or("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  if (!prefix) return prefix.error();
  v.add_bos = *add_bos;
  v.add_eos = *add_eos;
  v.add_space_prefix = *prefix;
  Result<bool> lowercase = file.get_bool_or("tokenizer.ggml.normalizer.lowercase", v.lowercase);
  if (!lowercase) return lowercase.error();
  Result<bool> strip = file.get_bool_or("tokenizer.ggml.normalizer.strip_accents", *lowercase);
  if (!strip) return strip.error();
  v.lowercase = *lowercase;
  v.strip_accents = *strip;
  // Defaults that do not exist in a small vocabulary mean "none".
  for (int32_t* id : {&v.bos, &v.eos, &v.eot, &v.eom, &v.unk, &v.sep, &v.pad, &v.mask}) {
    if (*id >= n) *id = kNoToken;
  }
  return {};
}

// The first of `texts` present in the vocabulary, or kNoToken. A token found this way is
// treated as a control token, whatever its declared type.
int32_t detect_by_text(Vocab& v, std::initializer_list<std::string_view> texts) {
  for (const std::string_view text : texts) {
    const int32_t id = v.find(text);
    if (id == kNoToken) continue;
    v.tokens[id].attr = kAttrControl;
    return id;
  }
  return kNoToken;
}

void detect_special_tokens(Vocab& v) {
  if (v.eot == kNoToken) {
    v.eot =
        detect_by_text(v, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                           "<EOT>", "<\uFF5Cend\u2581of\u2581sentence\uFF5C>"});
  }
  if (v.eom == kNoToken) v.eom = detect_by_text(v, {"<|eom_id|>"});
  if (v.fim_pre == kNoToken) {
    v.fim_pre = detect_by_text(
        v, {"<|fim_prefix|>", "<fim-prefix>", "<\uFF5Cfim\u2581begin\uFF5C>", "<PRE>"});
  }
  if (v.fim_suf == kNoToken) {
    v.fim_suf = detect_by_text(
        v, {"<|fim_suffix|>", "<fim-suffix>", "<\uFF5Cfim\u2581hole\uFF5C>", "<SUF>"});
  }
  if (v.fim_mid == kNoToken) {
    v.fim_mid = detect_by_text(
        v, {"<|fim_middle|>", "<fim-middle>", "<\uFF5Cfim\u2581end\uFF5C>", "<MID>"});
  }
  if (v.fim_pad == kNoToken) v.fim_pad = detect_by_text(v, {"<|fim_pad|>", "<fim-pad>", "<PAD>"});
  if (v.fim_rep == kNoToken) {
    v.fim_rep = detect_by_text(v, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"});
  }
  if (v.fim_sep == kNoToken) v.fim_sep = detect_by_text(v, {"<|file_sep|>"});

  // End of generation: FIM pad/repo/separator, tokens known by their text, EOS, EOT, EOM.
  std::vector<int32_t> eog = {v.fim_pad, v.fim_rep, v.fim_sep, v.eos, v.eot, v.eom};
  for (const std::string_view text : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                      "<|endoftext|>", "<|eom_id|>", "<EOT>"}) {
    eog.push_back(detect_by_text(v, {text}));
  }
  std::erase(eog, kNoToken);
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  v.eog_ids = std::move(eog);
}

// Special tokens are matched in the text longest first (ties: lower id first).
void collect_special_tokens(Vocab& v) {
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    if (v.tokens[id].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      v.special_tokens.push_back(static_cast<int32_t>(id));
    }
  }
  std::stable_sort(v.special_tokens.begin(), v.special_tokens.end(), [&](int32_t a, int32_t b) {
    return v.tokens[a].text.size() > v.tokens[b].text.size();
  });
}

// llama.cpp's per-model white-space rules for special tokens.
Result<void> apply_strip_rules(const gguf::File& file, Vocab& v) {
  Result<std::string> name = file.get_string_or("general.name", "");
  if (!name) return name.error();
  Result<std::string> pre = file.get_string_or("tokenizer.ggml.pre", "");
  if (!pre) return pre.error();
  std::string lower = *name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto set = [&](std::string_view text, uint32_t bit, bool on) {
    const int32_t id = v.find(text);
    if (id == kNoToken) return;
    v.tokens[id].attr = on ? (v.tokens[id].attr | bit) : (v.tokens[id].attr & ~bit);
  };
  const auto contains = [](const std::string& s, std::initializer_list<const char*> parts) {
    return std::any_of(parts.begin(), parts.end(),
                       [&](const char* p) { return s.find(p) != std::string::npos; });
  };
  if (contains(*pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"})) {
    set("<mask>", kAttrLstrip, true);
  } else if (contains(lower, {"phi-3", "phi3"})) {
    for (const int32_t id : v.special_tokens) v.tokens[id].attr |= kAttrRstrip;
    set("</s>", kAttrRstrip, true);
    for (const char* text : {"<unk>", "<s>", "<|endoftext|>"}) set(text, kAttrRstrip, false);
  }
  return {};
}

}  // namespace

Result<void> load_vocab(const gguf::File& file, Vocab& v) {
  if (!file.find("tokenizer.ggml.model")) {
    return file.error(ErrorCode::kUnsupported,
                      "no tokenizer (key 'tokenizer.ggml.model' is missing)");
  }
  Result<std::string> model = file.get_string("tokenizer.ggml.model");
  if (!model) return model.error();
  v.model = *model;
  QRUN_TRY(set_model_defaults(file, v));
  QRUN_TRY(set_pre_tokenizer(file, v));
  QRUN_TRY(read_tokens(file, v));
  QRUN_TRY(read_merges(file, v));
  QRUN_TRY(read_special_ids(file, v));
  detect_special_tokens(v);
  collect_special_tokens(v);
  v.pieces.reserve(v.tokens.size());
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    v.pieces.push_back(render_piece(v, static_cast<int32_t>(id)));
  }
  return apply_strip_rules(file, v);
}

}  // namespace qrun::tokenizer
