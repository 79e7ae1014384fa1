// Loading a GGUF vocabulary into Tokenizer::Vocab, as llama.cpp's llama_vocab::impl::load:
// model and pre-tokenizer, tokens with scores and types, merges, special token ids (from the
// metadata, else recognised by their text), and the special tokens in splitting order. The
// tables are compact (one text arena, int32 hash slots, merges keyed by token id pairs): a
// 49k-token vocabulary with 48k merges takes ~2 MiB instead of ~12 MiB of strings and nodes.
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
      // LLAMA_VOCAB_PRE_TYPE_QWEN2 (megrez keeps clean_spaces) and the types sharing its regex.
      {.names = {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open"},
       .steps = {Step::kQwen2},
       .clean_spaces = false},
      {.names = {"megrez", "stablelm2"}, .steps = {Step::kQwen2}},
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

// The tokenizer.ggml.* string array `key`, read in place (no copy of its strings); errors as
// GgufFile::get_str_array.
Result<const std::vector<std::string>*> str_array(const GgufFile& gguf, const char* key) {
  const GgufValue* v = gguf.find(key);
  if (v && v->is_array() && v->elem_type == GgufType::STRING) return &v->arr_s;
  return gguf.get_str_array(key).status();
}

// Checks tokenizer.ggml.merges before the tokens are read (so its errors come first);
// *merges is null for SPM.
Status find_merges(const GgufFile& gguf, const Vocab& vocab,
                   const std::vector<std::string>** merges) {
  *merges = nullptr;
  if (vocab.type != Vocab::Type::kBpe) return Status::Ok();
  if (!gguf.find("tokenizer.ggml.merges")) {
    return Status::Error("tokenizer.ggml.merges: missing, but a 'gpt2' (BPE) tokenizer needs it");
  }
  HC_ASSIGN_OR_RETURN(*merges, str_array(gguf, "tokenizer.ggml.merges"));
  return Status::Ok();
}

// Builds the merge table from "left right" entries (needs the tokens). Split at the first
// space after the first byte (as llama.cpp); an entry without one ranks the empty pair, which
// never matches. The first of duplicate entries keeps its rank.
void index_merges(const std::vector<std::string>& merges, Vocab* vocab) {
  if (merges.size() > static_cast<size_t>(INT32_MAX)) return;  // no rank fits; never matches
  vocab->merge_pairs.assign(merges.size(), Vocab::kNoPair);
  vocab->merge_table.reset(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const size_t pos = m.find(' ', 1);
    if (pos == std::string::npos) continue;
    const int32_t left = vocab->find(std::string_view(m).substr(0, pos));
    const int32_t right = vocab->find(std::string_view(m).substr(pos + 1));
    if (left < 0 || right < 0) {
      vocab->merges_by_text.try_emplace(m, static_cast<int32_t>(i));
      continue;
    }
    const uint64_t key = Vocab::pair_key(left, right);
    const int32_t rank = static_cast<int32_t>(i);
    if (vocab->merge_table.insert(Vocab::hash_pair(key), rank, [&](int32_t r) {
          return vocab->merge_pairs[r] == key;
        }) == rank) {
      vocab->merge_pairs[i] = key;
    }
  }
  if (!vocab->merges_by_text.empty()) {
    HC_LOG_DEBUG("tokenizer: %zu merges name texts that are not tokens",
                 vocab->merges_by_text.size());
  }
}

Status load_tokens(const GgufFile& gguf, Vocab* vocab) {
  if (!gguf.find("tokenizer.ggml.tokens")) {
    return Status::Error("tokenizer.ggml.tokens: missing (the file has no vocabulary)");
  }
  HC_ASSIGN_OR_RETURN(const std::vector<std::string>* texts_ptr,
                      str_array(gguf, "tokenizer.ggml.tokens"));
  const std::vector<std::string>& texts = *texts_ptr;
  if (texts.empty()) return Status::Error("tokenizer.ggml.tokens: empty vocabulary");
  if (texts.size() > static_cast<size_t>(INT32_MAX)) {
    return Status::Error("tokenizer.ggml.tokens: " + std::to_string(texts.size()) + " tokens");
  }
  const size_t n = texts.size();

  const GgufValue* scores = gguf.find("tokenizer.ggml.scores");
  if (const GgufValue* v = scores) {
    if (!v->is_array() || (v->elem_type != GgufType::FLOAT32 && v->elem_type != GgufType::INT32)) {
      return Status::Error("tokenizer.ggml.scores: expected an array of FLOAT32 or INT32, found " +
                           std::string(gguf_type_name(v->is_array() ? v->elem_type : v->type)) +
                           (v->is_array() ? " array" : ""));
    }
    const size_t n_scores = v->elem_type == GgufType::FLOAT32 ? v->arr_f.size() : v->arr_i.size();
    if (n_scores < n) {
      return Status::Error("tokenizer.ggml.scores: " + std::to_string(n_scores) +
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

  // An empty token is stored as "[EMPTY_<id>]".
  const auto empty_text = [](size_t i) { return "[EMPTY_" + std::to_string(i) + "]"; };
  size_t arena_bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    arena_bytes += texts[i].empty() ? empty_text(i).size() : texts[i].size();
  }
  if (arena_bytes > UINT32_MAX) {
    return Status::Error("tokenizer.ggml.tokens: " + std::to_string(arena_bytes) +
                         " bytes of token text (at most 4 GiB)");
  }
  vocab->text_arena.reserve(arena_bytes);
  vocab->text_offsets.reserve(n + 1);
  vocab->text_offsets.push_back(0);
  vocab->token_table.reset(n);
  for (size_t i = 0; i < n; ++i) {
    if (texts[i].empty()) {
      vocab->text_arena += empty_text(i);
    } else {
      vocab->text_arena += texts[i];
    }
    vocab->text_offsets.push_back(static_cast<uint32_t>(vocab->text_arena.size()));
    const int32_t id = static_cast<int32_t>(i);
    const std::string_view text = vocab->text(id);
    const int32_t existing = vocab->token_table.insert(
        Vocab::hash_text(text), id, [&](int32_t other) { return vocab->text(other) == text; });
    if (existing != id) {
      return Status::Error("tokenizer.ggml.tokens: duplicate token '" + std::string(text) +
                           "' at ids " + std::to_string(existing) + " and " + std::to_string(i));
    }
  }
  if (scores) {
    vocab->scores.resize(n);
    for (size_t i = 0; i < n; ++i) {
      vocab->scores[i] = static_cast<float>(scores->elem_type == GgufType::FLOAT32
                                                ? scores->arr_f[i]
                                                : static_cast<double>(scores->arr_i[i]));
    }
  }
  vocab->attrs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    vocab->attrs[i] = types.empty() ? kAttrNormal : attr_from_type(types[i]);
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

// llama.cpp finds EOT / EOM / FIM tokens by their text when the metadata does not name them,
// and makes sure they (and every end-of-generation token) are control tokens.
void detect_special_by_text(Vocab* vocab) {
  const auto mark_control = [&](int32_t id) {
    uint32_t& attr = vocab->attrs[id];
    if (!(attr & kAttrControl)) {
      const std::string_view text = vocab->text(id);
      HC_LOG_DEBUG("tokenizer: control-looking token %d '%.*s' was not control-type; overriding",
                   id, static_cast<int>(text.size()), text.data());
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
  // With several candidates, llama.cpp keeps the first one its token_to_id (a
  // std::unordered_map<std::string, int>, filled in id order) yields. Only then is that order
  // needed, and it is rebuilt for the moment: the same insertions into a std::unordered_map of
  // the same hash (std::hash<std::string_view> hashes as std::hash<std::string> does) iterate
  // in the same order.
  std::unordered_map<std::string_view, int32_t> llama_token_to_id;
  for (const Rule& rule : rules) {
    if (*rule.id != -1) continue;
    std::vector<int32_t> found;
    for (const char* text : rule.texts) {
      if (const int32_t id = vocab->find(text); id >= 0) found.push_back(id);
    }
    if (found.empty()) continue;
    int32_t chosen = found[0];
    if (found.size() > 1) {
      if (llama_token_to_id.empty()) {
        for (int32_t id = 0; id < vocab->n_vocab(); ++id) llama_token_to_id.emplace(vocab->text(id), id);
      }
      for (const auto& [text, id] : llama_token_to_id) {
        if (std::find(found.begin(), found.end(), id) != found.end()) {
          chosen = id;
          break;
        }
      }
    }
    *rule.id = chosen;
    mark_control(chosen);
  }
  llama_token_to_id = {};

  vocab->eog.clear();
  for (const int32_t id : {vocab->fim_pad, vocab->fim_rep, vocab->fim_sep}) {
    if (id != -1) vocab->eog.insert(id);
  }
  for (const char* text : {"<|eot_id|>",
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
                           "[e~["}) {
    if (const int32_t id = vocab->find(text); id >= 0) {
      vocab->eog.insert(id);
      mark_control(id);
    }
  }
  // gpt-oss: these render as text even when special tokens are hidden.
  for (const char* text : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (const int32_t id = vocab->find(text); id >= 0) vocab->attrs[id] = kAttrUserDefined;
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
    vocab->attrs[end_id] = kAttrUserDefined;
  }
  // gemma4 / paddleocr: "</s>" is not an end of generation next to "<|tool_response>".
  if (eog_has("<|tool_response>") && eog_has("</s>")) {
    const int32_t s_id = vocab->find("</s>");
    vocab->eog.erase(s_id);
    vocab->attrs[s_id] = kAttrNormal;
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
    for (const int32_t id : vocab->special_tokens) vocab->attrs[id] |= kAttrRstrip;
    if (const int32_t id = vocab->find("</s>"); id >= 0) vocab->attrs[id] |= kAttrRstrip;
    for (const char* text : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (const int32_t id = vocab->find(text); id >= 0) vocab->attrs[id] &= ~kAttrRstrip;
    }
  }
}

void build_caches(Vocab* vocab) {
  for (int32_t id = 0; id < vocab->n_vocab(); ++id) {
    if (vocab->attr(id) & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      vocab->special_tokens.push_back(id);
    }
  }
  // std::sort (not stable) like llama.cpp, so equal-length tokens keep llama.cpp's order.
  std::sort(vocab->special_tokens.begin(), vocab->special_tokens.end(), [&](int32_t a, int32_t b) {
    return vocab->text(a).size() > vocab->text(b).size();
  });
}

}  // namespace

void IndexTable::reset(size_t n) {
  size_t capacity = 16;
  while (capacity * 3 < 4 * n) capacity *= 2;  // at most 3/4 full
  slots_.assign(capacity, -1);
}

uint64_t Tokenizer::Vocab::hash_pair(uint64_t key) {
  // splitmix64's finalizer: every key bit reaches the low bits the table indexes by.
  key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ull;
  key = (key ^ (key >> 27)) * 0x94d049bb133111ebull;
  return key ^ (key >> 31);
}

// llama_token_to_piece with special = true (rendered on demand: nothing is cached per token).
std::string Tokenizer::Vocab::render_piece(int32_t id) const {
  const std::string_view text = this->text(id);
  const uint32_t attr = attrs[id];
  if (attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return std::string(text);
  if (attr & kAttrNormal) {
    std::string out;
    out.reserve(text.size());
    if (type == Type::kSpm) {
      // U+2581 (LOWER ONE EIGHTH BLOCK) stands for a space.
      for (size_t i = 0; i < text.size(); ++i) {
        if (text.compare(i, 3, "\xe2\x96\x81") == 0) {
          out += ' ';
          i += 2;
        } else {
          out += text[i];
        }
      }
      return out;
    }
    // Fast path: one- and two-byte characters that all stand for bytes (every token of a real
    // byte-level vocabulary), decoded as cpts_from_utf8 does.
    for (size_t i = 0; i < text.size(); ++i) {
      const auto b0 = static_cast<uint8_t>(text[i]);
      uint32_t cpt = b0;
      if (b0 >= 0x80) {
        if ((b0 & 0xE0) != 0xC0 || i + 1 == text.size() ||
            (static_cast<uint8_t>(text[i + 1]) & 0xC0) != 0x80) {
          break;
        }
        cpt = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(text[++i]) & 0x3Fu);
      }
      const int byte = unicode::gpt2_to_byte(cpt);
      if (byte < 0) break;
      out += static_cast<char>(byte);
      if (i + 1 == text.size()) return out;
    }
    out.clear();
    for (const uint32_t cpt : unicode::cpts_from_utf8(text)) {
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
      out += text;
      out += ']';
    }
    return out;
  }
  if (attr & kAttrByte) {
    // "<0xXX>" -> the byte.
    if (text.size() >= 5) {
      const std::string hex(text.substr(3, 2));
      return std::string(1, static_cast<char>(std::strtol(hex.c_str(), nullptr, 16)));
    }
    return "";
  }
  return "";  // unused / undefined tokens render as nothing
}

Result<std::shared_ptr<const Tokenizer::Vocab>> load_vocab(const GgufFile& gguf) {
  auto vocab = std::make_shared<Vocab>();
  HC_TRY(load_model_type(gguf, vocab.get()));
  const std::vector<std::string>* merges = nullptr;
  HC_TRY(find_merges(gguf, *vocab, &merges));
  HC_TRY(load_tokens(gguf, vocab.get()));
  if (merges) index_merges(*merges, vocab.get());
  HC_TRY(load_special_ids(gguf, vocab.get()));
  detect_special_by_text(vocab.get());
  build_caches(vocab.get());
  apply_name_fixups(gguf, vocab.get());
  return std::shared_ptr<const Vocab>(std::move(vocab));
}

}  // namespace hc
