// Loading a GGUF vocabulary into Tokenizer::Vocab, as llama.cpp's llama_vocab::impl::load:
// model and pre-tokenizer, tokens with scores and types, merges, special token ids (from the
// metadata, else recognised by their text), and the per-token piece cache.
#include "tokenizer/vocab.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>

#include "core/log.h"
#include "tokenizer/unicode.h"

namespace hc {

namespace {

using Vocab = Tokenizer::Vocab;

// GGUF token types (tokenizer.ggml.token_type).
enum GgufTokenType : int32_t {
  kTypeUndefined = 0,
  kTypeNormal = 1,
  kTypeUnknown = 2,
  kTypeControl = 3,
  kTypeUserDefined = 4,
  kTypeUnused = 5,
  kTypeByte = 6,
};

uint32_t attr_from_type(int32_t type) {
  switch (type) {
    case kTypeNormal:
      return kAttrNormal;
    case kTypeUnknown:
      return kAttrUnknown;
    case kTypeControl:
      return kAttrControl;
    case kTypeUserDefined:
      return kAttrUserDefined;
    case kTypeUnused:
      return kAttrUnused;
    case kTypeByte:
      return kAttrByte;
    default:
      return kAttrUndefined;
  }
}

using pretok::Step;

// tokenizer.ggml.pre -> llama.cpp's regex list for it (llm_tokenizer_bpe), plus the flags
// llama_vocab::impl::load sets for it.
struct PreTokenizer {
  std::vector<const char*> names;
  std::vector<Step> steps;
  bool clean_spaces = true;    // decode drops spaces before punctuation
  bool ignore_merges = false;  // a word that is a token is taken whole
  bool add_bos = false;        // default before tokenizer.ggml.add_bos_token is read
};

const std::vector<PreTokenizer>& pre_tokenizers() {
  static const std::vector<PreTokenizer> table = {
      {.names = {"default"},
       .steps = {Step::kPunctRunDefault, Step::kGpt2, Step::kNumbers, Step::kThreeDigits}},
      {.names = {"gpt-2", "phi-2", "mpt", "olmo", "jais", "exaone4", "a.x-4.0", "mellum",
                 "gigachat"},
       .steps = {Step::kGpt2}},
      {.names = {"trillion", "granite-docling"}, .steps = {Step::kGpt2}, .clean_spaces = false},
      {.names = {"starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"},
       .steps = {Step::kNumber, Step::kGpt2}},
      {.names = {"smollm", "command-r"},
       .steps = {Step::kNumber, Step::kGpt2},
       .clean_spaces = false},
      {.names = {"falcon"}, .steps = {Step::kPunctRunFalcon, Step::kGpt2, Step::kThreeDigits}},
      {.names = {"deepseek-coder"},
       .steps = {Step::kNewline, Step::kSpaceLetters, Step::kSpacePunct, Step::kCjk, Step::kNumber},
       .clean_spaces = false},
      {.names = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                 "lfm2", "jina-v5-nano"},
       .steps = {Step::kLlama3},
       .ignore_merges = true,
       .add_bos = true},
      {.names = {"dbrx", "smaug-bpe"}, .steps = {Step::kLlama3}},
  };
  return table;
}

const PreTokenizer* find_pre_tokenizer(const std::string& name) {
  for (const PreTokenizer& p : pre_tokenizers()) {
    for (const char* n : p.names) {
      if (name == n) return &p;
    }
  }
  return nullptr;
}

std::string supported_pre_names() {
  std::string s;
  for (const PreTokenizer& p : pre_tokenizers()) {
    for (const char* n : p.names) s += (s.empty() ? "" : ", ") + std::string(n);
  }
  return s;
}

// Reads an optional token id key into *id. llama.cpp keeps the previous value (and warns)
// when the id is outside the vocabulary; a value of the wrong type is an error.
Status read_token_id(const GgufFile& gguf, const char* key, int32_t n_vocab, int32_t* id) {
  if (!gguf.find(key)) return Status::Ok();
  Result<uint32_t> v = gguf.get_u32(key);
  if (!v.ok()) return v.status();
  if (*v >= static_cast<uint32_t>(n_vocab)) {
    HC_LOG_WARN("tokenizer: %s = %u is outside the vocabulary (%d tokens); using %d", key, *v,
                n_vocab, *id);
    return Status::Ok();
  }
  *id = static_cast<int32_t>(*v);
  return Status::Ok();
}

Status load_model_type(const GgufFile& gguf, Vocab* vocab) {
  HC_ASSIGN_OR_RETURN(vocab->model, gguf.get_string("tokenizer.ggml.model"));
  if (gguf.find("tokenizer.ggml.pre")) {
    HC_ASSIGN_OR_RETURN(vocab->pre, gguf.get_string("tokenizer.ggml.pre"));
  }
  if (vocab->model == "llama") {
    vocab->type = Vocab::Type::kSpm;
    vocab->bos = 1;
    vocab->eos = 2;
    vocab->unk = 0;
    vocab->add_space_prefix = true;
    vocab->clean_spaces = false;
    vocab->add_bos = true;
    vocab->add_eos = false;
    if (vocab->pre.empty()) vocab->pre = "default";
  } else if (vocab->model == "gpt2") {
    vocab->type = Vocab::Type::kBpe;
    vocab->bos = 11;
    vocab->eos = 11;
    vocab->add_space_prefix = false;
    if (vocab->pre.empty()) {
      HC_LOG_WARN(
          "tokenizer: tokenizer.ggml.pre is missing; using the 'default' pre-tokenizer "
          "(generation quality will be degraded)");
      vocab->pre = "default";
    }
    const PreTokenizer* pre = find_pre_tokenizer(vocab->pre);
    if (!pre) {
      return Status::Error("tokenizer.ggml.pre: unsupported pre-tokenizer '" + vocab->pre +
                           "' (supported: " + supported_pre_names() + ")");
    }
    vocab->pre_steps = pre->steps;
    vocab->clean_spaces = pre->clean_spaces;
    vocab->ignore_merges = pre->ignore_merges;
    vocab->add_bos = pre->add_bos;
  } else {
    return Status::Error("tokenizer.ggml.model: unsupported tokenizer model '" + vocab->model +
                         "' (supported: 'llama' (SentencePiece), 'gpt2' (byte-level BPE))");
  }
  HC_ASSIGN_OR_RETURN(vocab->add_space_prefix,
                      gguf.get_bool_or("tokenizer.ggml.add_space_prefix", vocab->add_space_prefix));
  return Status::Ok();
}

Status load_merges(const GgufFile& gguf, Vocab* vocab) {
  if (vocab->type != Vocab::Type::kBpe) return Status::Ok();
  if (!gguf.find("tokenizer.ggml.merges")) {
    return Status::Error("tokenizer.ggml.merges: missing, but a 'gpt2' (BPE) tokenizer needs it");
  }
  HC_ASSIGN_OR_RETURN(std::vector<std::string> merges, gguf.get_str_array("tokenizer.ggml.merges"));
  vocab->bpe_ranks.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    // "left right", split at the first space after the first byte (as llama.cpp); an entry
    // without one ranks the empty pair, which never matches.
    const std::string& m = merges[i];
    const size_t pos = m.find(' ', 1);
    std::string key = pos == std::string::npos ? std::string(" ") : m;
    vocab->bpe_ranks.try_emplace(std::move(key), static_cast<int32_t>(i));
  }
  return Status::Ok();
}

Status load_tokens(const GgufFile& gguf, Vocab* vocab) {
  if (!gguf.find("tokenizer.ggml.tokens")) {
    return Status::Error("tokenizer.ggml.tokens: missing (the file has no vocabulary)");
  }
  HC_ASSIGN_OR_RETURN(std::vector<std::string> texts, gguf.get_str_array("tokenizer.ggml.tokens"));
  if (texts.empty()) return Status::Error("tokenizer.ggml.tokens: empty vocabulary");
  if (texts.size() > static_cast<size_t>(INT32_MAX)) {
    return Status::Error("tokenizer.ggml.tokens: " + std::to_string(texts.size()) + " tokens");
  }
  const size_t n = texts.size();

  std::vector<double> scores;
  if (const GgufValue* v = gguf.find("tokenizer.ggml.scores")) {
    if (!v->is_array() || (v->elem_type != GgufType::FLOAT32 && v->elem_type != GgufType::INT32)) {
      return Status::Error("tokenizer.ggml.scores: expected an array of FLOAT32 or INT32, found " +
                           std::string(gguf_type_name(v->is_array() ? v->elem_type : v->type)) +
                           (v->is_array() ? " array" : ""));
    }
    if (v->elem_type == GgufType::FLOAT32) {
      scores = v->arr_f;
    } else {
      scores.assign(v->arr_i.begin(), v->arr_i.end());
    }
    if (scores.size() < n) {
      return Status::Error("tokenizer.ggml.scores: " + std::to_string(scores.size()) +
                           " scores for " + std::to_string(n) + " tokens");
    }
  }
  std::vector<int32_t> types;
  if (const GgufValue* v = gguf.find("tokenizer.ggml.token_type")) {
    if (!v->is_array() || v->elem_type != GgufType::INT32) {
      return Status::Error("tokenizer.ggml.token_type: expected an array of INT32, found " +
                           std::string(gguf_type_name(v->is_array() ? v->elem_type : v->type)) +
                           (v->is_array() ? " array" : ""));
    }
    HC_ASSIGN_OR_RETURN(types, gguf.get_i32_array("tokenizer.ggml.token_type"));
    if (types.size() < n) {
      return Status::Error("tokenizer.ggml.token_type: " + std::to_string(types.size()) +
                           " types for " + std::to_string(n) + " tokens");
    }
  }

  vocab->tokens.resize(n);
  for (size_t i = 0; i < n; ++i) {
    std::string text = std::move(texts[i]);
    if (text.empty()) text = "[EMPTY_" + std::to_string(i) + "]";
    const auto [it, inserted] = vocab->token_to_id.emplace(text, static_cast<int32_t>(i));
    if (!inserted) {
      return Status::Error("tokenizer.ggml.tokens: duplicate token '" + text + "' at ids " +
                           std::to_string(it->second) + " and " + std::to_string(i));
    }
    Vocab::Token& tok = vocab->tokens[i];
    tok.text = std::move(text);
    tok.score = scores.empty() ? 0.0f : static_cast<float>(scores[i]);
    tok.attr = types.empty() ? kAttrNormal : attr_from_type(types[i]);
  }
  return Status::Ok();
}

Status load_special_ids(const GgufFile& gguf, Vocab* vocab) {
  const int32_t n = vocab->n_vocab();
  const std::array<std::pair<const char*, int32_t*>, 17> keys = {{
      {"tokenizer.ggml.bos_token_id", &vocab->bos},
      {"tokenizer.ggml.eos_token_id", &vocab->eos},
      {"tokenizer.ggml.eot_token_id", &vocab->eot},
      {"tokenizer.ggml.eom_token_id", &vocab->eom},
      {"tokenizer.ggml.unknown_token_id", &vocab->unk},
      {"tokenizer.ggml.seperator_token_id", &vocab->sep},  // sic, as in GGUF
      {"tokenizer.ggml.padding_token_id", &vocab->pad},
      {"tokenizer.ggml.mask_token_id", &vocab->mask},
      {"tokenizer.ggml.fim_pre_token_id", &vocab->fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &vocab->fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &vocab->fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &vocab->fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &vocab->fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &vocab->fim_sep},
      {"tokenizer.ggml.prefix_token_id", &vocab->fim_pre},  // deprecated names
      {"tokenizer.ggml.suffix_token_id", &vocab->fim_suf},
      {"tokenizer.ggml.middle_token_id", &vocab->fim_mid},
  }};
  for (const auto& [key, id] : keys) {
    if (*id >= n) *id = -1;  // a default id the vocabulary is too small for
    HC_TRY(read_token_id(gguf, key, n, id));
  }
  HC_ASSIGN_OR_RETURN(vocab->add_bos,
                      gguf.get_bool_or("tokenizer.ggml.add_bos_token", vocab->add_bos));
  HC_ASSIGN_OR_RETURN(vocab->add_eos,
                      gguf.get_bool_or("tokenizer.ggml.add_eos_token", vocab->add_eos));
  if (vocab->add_bos && vocab->bos < 0) {
    return Status::Error(
        "tokenizer.ggml.add_bos_token is true, but the vocabulary has no BOS "
        "token (tokenizer.ggml.bos_token_id)");
  }
  if (vocab->add_eos && vocab->eos < 0) {
    return Status::Error(
        "tokenizer.ggml.add_eos_token is true, but the vocabulary has no EOS "
        "token (tokenizer.ggml.eos_token_id)");
  }
  return Status::Ok();
}

bool one_of(const std::string& s, std::initializer_list<const char*> list) {
  for (const char* x : list) {
    if (s == x) return true;
  }
  return false;
}

// llama.cpp finds EOT / EOM / FIM tokens by their text when the metadata does not name them,
// and makes sure they (and every end-of-generation token) are control tokens.
void detect_special_by_text(Vocab* vocab) {
  const auto mark_control = [&](int32_t id) {
    uint32_t& attr = vocab->tokens[id].attr;
    if (!(attr & kAttrControl)) {
      HC_LOG_DEBUG("tokenizer: control-looking token %d '%s' was not control-type; overriding", id,
                   vocab->tokens[id].text.c_str());
      attr |= kAttrControl;
    }
  };
  struct Rule {
    int32_t* id;
    std::initializer_list<const char*> texts;
  };
  const Rule rules[] = {
      {&vocab->eot,
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
        "<EOT>", "_<EOT>", "[EOT]",
        "<\xef\xbd\x9c"
        "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
        "<end_of_utterance>"}},
      {&vocab->eom, {"<|eom_id|>"}},
      {&vocab->fim_pre,
       {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
        "<\xef\xbd\x9c"
        "fim\xe2\x96\x81"
        "begin\xef\xbd\x9c>",
        "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"}},
      {&vocab->fim_suf,
       {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
        "<\xef\xbd\x9c"
        "fim\xe2\x96\x81hole\xef\xbd\x9c>",
        "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"}},
      {&vocab->fim_mid,
       {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
        "<\xef\xbd\x9c"
        "fim\xe2\x96\x81"
        "end\xef\xbd\x9c>",
        "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"}},
      {&vocab->fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
      {&vocab->fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
      {&vocab->fim_sep, {"<|file_sep|>"}},
  };
  // Iterating the hash map (not ids) matters: with several candidates, llama.cpp keeps the
  // first one its std::unordered_map yields, and ours is built identically.
  for (const auto& [text, id] : vocab->token_to_id) {
    for (const Rule& rule : rules) {
      if (*rule.id == -1 && one_of(text, rule.texts)) {
        *rule.id = id;
        mark_control(id);
      }
    }
  }

  vocab->eog.clear();
  for (const int32_t id : {vocab->fim_pad, vocab->fim_rep, vocab->fim_sep}) {
    if (id != -1) vocab->eog.insert(id);
  }
  for (const auto& [text, id] : vocab->token_to_id) {
    if (one_of(text, {"<|eot_id|>",
                      "<|im_end|>",
                      "<|end|>",
                      "<|return|>",
                      "<|call|>",
                      "<|flush|>",
                      "<|calls|>",
                      "<end_of_turn>",
                      "<|endoftext|>",
                      "</s>",
                      "<|eom_id|>",
                      "<EOT>",
                      "_<EOT>",
                      "[EOT]",
                      "[EOS]",
                      "<|end_of_text|>",
                      "<end_of_utterance>",
                      "<eos>",
                      "<turn|>",
                      "<|tool_response>",
                      "<\xef\xbd\x9c"
                      "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                      "[e~["})) {
      vocab->eog.insert(id);
      mark_control(id);
    }
  }
  // gpt-oss: these render as text even when special tokens are hidden.
  for (const auto& [text, id] : vocab->token_to_id) {
    if (one_of(text, {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})) {
      vocab->tokens[id].attr = kAttrUserDefined;
    }
  }
  for (const int32_t id : {vocab->eos, vocab->eot, vocab->eom}) {
    if (id != -1) vocab->eog.insert(id);
  }

  // o200k_harmony / solar-open: "<|end|>" ends a message, not the generation.
  const auto eog_has = [&](const char* text) {
    const int32_t id = vocab->find(text);
    return id >= 0 && vocab->eog.count(id) > 0;
  };
  if (eog_has("<|end|>") && ((eog_has("<|return|>") && eog_has("<|call|>")) ||
                             (eog_has("<|calls|>") && eog_has("<|flush|>")) ||
                             (eog_has("<|return|>") && eog_has("<|calls|>")) ||
                             (eog_has("<|call|>") && eog_has("<|flush|>")))) {
    const int32_t end_id = vocab->find("<|end|>");
    vocab->eog.erase(end_id);
    vocab->tokens[end_id].attr = kAttrUserDefined;
  }
  // gemma4 / paddleocr: "</s>" is not an end of generation next to "<|tool_response>".
  if (eog_has("<|tool_response>") && eog_has("</s>")) {
    const int32_t s_id = vocab->find("</s>");
    vocab->eog.erase(s_id);
    vocab->tokens[s_id].attr = kAttrNormal;
  }
}

// Per-model attribute fix-ups llama.cpp applies by name (after building its caches).
void apply_name_fixups(const GgufFile& gguf, Vocab* vocab) {
  std::string name;
  if (const GgufValue* v = gguf.find("general.name")) {
    if (const auto* s = std::get_if<std::string>(&v->scalar); s && !v->is_array()) name = *s;
  }
  std::transform(name.begin(), name.end(), name.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    // Phi-3's special tokens swallow the whitespace after them, except these three.
    for (const int32_t id : vocab->special_tokens) vocab->tokens[id].attr |= kAttrRstrip;
    if (const int32_t id = vocab->find("</s>"); id >= 0) vocab->tokens[id].attr |= kAttrRstrip;
    for (const char* text : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (const int32_t id = vocab->find(text); id >= 0) vocab->tokens[id].attr &= ~kAttrRstrip;
    }
  }
}

// llama_token_to_piece with special = true, before any caching.
std::string render_piece(const Vocab& vocab, int32_t id) {
  const Vocab::Token& tok = vocab.tokens[id];
  if (tok.attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return tok.text;
  if (tok.attr & kAttrNormal) {
    std::string out;
    if (vocab.type == Vocab::Type::kSpm) {
      // U+2581 (LOWER ONE EIGHTH BLOCK) stands for a space.
      for (size_t i = 0; i < tok.text.size(); ++i) {
        if (tok.text.compare(i, 3, "\xe2\x96\x81") == 0) {
          out += ' ';
          i += 2;
        } else {
          out += tok.text[i];
        }
      }
      return out;
    }
    for (const uint32_t cpt : unicode::cpts_from_utf8(tok.text)) {
      const int byte = unicode::gpt2_to_byte(cpt);
      if (byte >= 0) {
        out += static_cast<char>(byte);
        continue;
      }
      // Not a byte stand-in: llama.cpp's llama_decode_text spells out what it found.
      std::string utf8;
      unicode::append_utf8(&utf8, cpt);
      out += "[UNK_BYTE_0x";
      for (const char c : utf8) {
        static constexpr char kHex[] = "0123456789abcdef";
        out += kHex[static_cast<uint8_t>(c) >> 4];
        out += kHex[static_cast<uint8_t>(c) & 15];
      }
      out += tok.text + "]";
    }
    return out;
  }
  if (tok.attr & kAttrByte) {
    // "<0xXX>" -> the byte.
    if (tok.text.size() >= 5) {
      const std::string hex = tok.text.substr(3, 2);
      return std::string(1, static_cast<char>(std::strtol(hex.c_str(), nullptr, 16)));
    }
    return "";
  }
  return "";  // unused / undefined tokens render as nothing
}

void build_caches(Vocab* vocab) {
  for (int32_t id = 0; id < vocab->n_vocab(); ++id) {
    if (vocab->tokens[id].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      vocab->special_tokens.push_back(id);
    }
  }
  // std::sort (not stable) like llama.cpp, so equal-length tokens keep llama.cpp's order.
  std::sort(vocab->special_tokens.begin(), vocab->special_tokens.end(), [&](int32_t a, int32_t b) {
    return vocab->tokens[a].text.size() > vocab->tokens[b].text.size();
  });
  vocab->pieces.resize(vocab->tokens.size());
  for (int32_t id = 0; id < vocab->n_vocab(); ++id) vocab->pieces[id] = render_piece(*vocab, id);
}

}  // namespace

Result<std::shared_ptr<const Tokenizer::Vocab>> load_vocab(const GgufFile& gguf) {
  auto vocab = std::make_shared<Vocab>();
  HC_TRY(load_model_type(gguf, vocab.get()));
  HC_TRY(load_merges(gguf, vocab.get()));
  HC_TRY(load_tokens(gguf, vocab.get()));
  HC_TRY(load_special_ids(gguf, vocab.get()));
  detect_special_by_text(vocab.get());
  build_caches(vocab.get());
  apply_name_fixups(gguf, vocab.get());
  return std::shared_ptr<const Vocab>(std::move(vocab));
}

}  // namespace hc
