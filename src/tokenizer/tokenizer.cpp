// hc::Tokenizer: splitting special tokens out of text, dispatching the rest to the SPM or BPE
// tokenizer, and rendering tokens back to text (llama_tokenize / llama_detokenize).
#include "tokenizer/tokenizer.h"

#include "tokenizer/vocab.h"

namespace hc {

namespace {

using Vocab = Tokenizer::Vocab;

// A run of text still to be tokenized, or a token already split out of it.
struct Fragment {
  int32_t token;  // -1 for raw text
  size_t offset;  // raw text: [offset, offset + length) of the input
  size_t length;
};

bool is_c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// llama.cpp's tokenizer_st_partition: for each special token, longest first, split every raw
// fragment at each occurrence. Control and unknown tokens only count with parse_special;
// user-defined ones always do.
std::vector<Fragment> partition_special(const Vocab& vocab, std::string_view text,
                                        bool parse_special) {
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  for (const int32_t id : vocab.special_tokens) {
    const uint32_t attr = vocab.attr(id);
    if (!parse_special && (attr & (kAttrControl | kAttrUnknown))) continue;
    const std::string_view needle = vocab.text(id);
    std::vector<Fragment> next;
    next.reserve(frags.size());
    for (const Fragment& frag : frags) {
      if (frag.token >= 0) {
        next.push_back(frag);
        continue;
      }
      size_t base = frag.offset;
      size_t len = frag.length;
      while (true) {
        const size_t match = text.substr(0, base + len).find(needle, base);
        if (match == std::string_view::npos) {
          if (len > 0) next.push_back({-1, base, len});
          break;
        }
        size_t left_len = match - base;
        if (attr & kAttrLstrip) {
          while (left_len > 0 && is_c_space(text[base + left_len - 1])) left_len--;
        }
        if (left_len > 0) next.push_back({-1, base, left_len});
        next.push_back({id, 0, 0});
        size_t right = match + needle.size();
        size_t right_len = base + len - right;
        if (attr & kAttrRstrip) {
          while (right_len > 0 && is_c_space(text[right])) {
            right++;
            right_len--;
          }
        }
        base = right;
        len = right_len;
      }
    }
    frags = std::move(next);
  }
  return frags;
}

// llama_detokenize's clean-up (HF's clean_up_tokenization_spaces), done in place exactly as
// llama.cpp does it, including the NUL it leaves behind in the second pass (which stops a
// following " ' " from matching).
void clean_up_spaces(std::string* s) {
  std::string& text = *s;
  size_t total = text.size();
  // " ?", " !", " .", " ," -> no space.
  const size_t total1 = total;
  total = total ? 1 : 0;
  for (size_t i = 1; i < total1; ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) total--;
    text[total++] = x;
  }
  // " ' " -> "'".
  const size_t total2 = total;
  total = total ? 1 : 0;
  for (size_t i = 1; i < total2; ++i) {
    const char x = text[i];
    if (x == '\'' && i + 1 < total2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
      total--;
      text[++i] = '\0';
    }
    text[total++] = x;
  }
  // " 's", " 'm", " 're", " 've" -> no space (" 't", " 'd", " 'll" keep theirs).
  const size_t total3 = total;
  total = total ? 1 : 0;
  for (size_t i = 1; i < total3; ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
      const char x1 = text[i + 1];
      if (x1 == 's' || x1 == 'm') {
        total--;
      } else if (x1 != 't' && x1 != 'd' && i + 2 < total3) {
        const char x2 = text[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) total--;
      }
    }
    text[total++] = x;
  }
  text.resize(total);
}

}  // namespace

Result<Tokenizer> Tokenizer::from_gguf(const GgufFile& gguf) {
  HC_ASSIGN_OR_RETURN(std::shared_ptr<const Vocab> vocab, load_vocab(gguf));
  return Tokenizer(std::move(vocab));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  const Vocab& v = *vocab_;
  std::vector<int32_t> out;
  if (add_special && v.add_bos) out.push_back(v.bos);
  bool prev_special = true;  // SPM: text at the start or after a special token gets a space
  for (const Fragment& frag : partition_special(v, text, parse_special)) {
    if (frag.token >= 0) {
      out.push_back(frag.token);
      prev_special = true;
      continue;
    }
    const std::string_view raw = text.substr(frag.offset, frag.length);
    if (v.type == Vocab::Type::kSpm) {
      std::string escaped;
      escaped.reserve(raw.size() + 3);
      if (v.add_space_prefix && prev_special) escaped = "\xe2\x96\x81";
      for (const char c : raw) {
        if (c == ' ') {
          escaped += "\xe2\x96\x81";
        } else {
          escaped += c;
        }
      }
      spm_tokenize(v, escaped, &out);
    } else {
      bpe_tokenize(v, raw, &out);
    }
    prev_special = false;
  }
  if (add_special && v.add_eos) out.push_back(v.eos);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
  const Vocab& v = *vocab_;
  if (!v.valid(id)) return "";
  if (!special && (v.attr(id) & (kAttrUnknown | kAttrControl))) return "";
  return v.render_piece(id);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool special) const {
  const Vocab& v = *vocab_;
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece = token_to_piece(ids[i], special);
    // The space SPM put in front of the text is not part of it.
    if (i == 0 && v.add_space_prefix && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    text += piece;
  }
  if (v.clean_spaces) clean_up_spaces(&text);
  return text;
}

int32_t Tokenizer::n_vocab() const { return vocab_->n_vocab(); }
int32_t Tokenizer::bos_id() const { return vocab_->bos; }
int32_t Tokenizer::eos_id() const { return vocab_->eos; }
int32_t Tokenizer::eot_id() const { return vocab_->eot; }
bool Tokenizer::is_eog(int32_t id) const { return id != -1 && vocab_->eog.count(id) > 0; }
bool Tokenizer::add_bos() const { return vocab_->add_bos; }
bool Tokenizer::add_eos() const { return vocab_->add_eos; }
int32_t Tokenizer::token_id(std::string_view piece) const { return vocab_->find(piece); }
std::string_view Tokenizer::token_text(int32_t id) const {
  HC_CHECK(vocab_->valid(id));
  return vocab_->text(id);
}
const std::string& Tokenizer::model_name() const { return vocab_->model; }
const std::string& Tokenizer::pre_name() const { return vocab_->pre; }

}  // namespace hc
