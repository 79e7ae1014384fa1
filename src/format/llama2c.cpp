#include "format/llama2c.h"

#include <array>
#include <cctype>
#include <cstdint>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>

namespace hc {
namespace {

constexpr size_t kHeaderBytes = 7 * sizeof(int32_t);

// Sanity limits on header values: far above any real llama2.c model, low enough that every
// size computed from them fits easily in int64 and a garbage header is rejected up front.
constexpr int32_t kMaxDim = 1 << 16;
constexpr int32_t kMaxHiddenDim = 1 << 20;
constexpr int32_t kMaxLayers = 1 << 12;
constexpr int32_t kMaxVocab = 1 << 22;
constexpr int32_t kMaxSeqLen = 1 << 24;
constexpr int32_t kMaxTokenBytes = 1 << 16;

// llama2.c's newer export formats (version >= 1) start with this magic instead of a header.
constexpr uint32_t kLlama2cV1Magic = 0x616b3432;  // "ak42"

std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string strprintf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char buf[512];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

int32_t read_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

float read_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

std::string describe(const Llama2cConfig& c) {
  return strprintf("dim=%d hidden_dim=%d n_layers=%d n_heads=%d n_kv_heads=%d vocab_size=%d%s "
                   "seq_len=%d",
                   c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size,
                   c.shared_classifier ? "" : " (unshared classifier)", c.seq_len);
}

// Consecutive regions of the checkpoint payload (after the header), in file order.
enum Region {
  kTokEmbd, kRmsAtt, kWq, kWk, kWv, kWo, kRmsFfn, kW1, kW2, kW3, kRmsFinal,
  kFreqCisReal, kFreqCisImag, kWcls, kNumRegions,
};

struct Layout {
  std::array<int64_t, kNumRegions> n_floats{};  // 0 for an absent region (shared wcls)
  std::array<int64_t, kNumRegions> offset{};    // in floats from the end of the header
  int64_t total_floats = 0;
};

const char* region_name(int r) {
  static const char* const kNames[kNumRegions] = {
      "token_embedding_table", "rms_att_weight", "wq", "wk", "wv", "wo", "rms_ffn_weight",
      "w1", "w2", "w3", "rms_final_weight", "freq_cis_real", "freq_cis_imag", "wcls"};
  return kNames[r];
}

Layout payload_layout(const Llama2cConfig& c) {
  const int64_t n_embd = c.dim, n_ff = c.hidden_dim, n_layer = c.n_layers;
  const int64_t n_vocab = c.vocab_size, n_embd_kv = c.kv_dim();
  Layout l;
  l.n_floats[kTokEmbd] = n_vocab * n_embd;        // [n_vocab][n_embd]
  l.n_floats[kRmsAtt] = n_layer * n_embd;         // [n_layer][n_embd]
  l.n_floats[kWq] = n_layer * n_embd * n_embd;    // [n_layer][n_embd (out)][n_embd (in)]
  l.n_floats[kWk] = n_layer * n_embd_kv * n_embd; // [n_layer][n_embd_kv][n_embd]
  l.n_floats[kWv] = n_layer * n_embd_kv * n_embd; // [n_layer][n_embd_kv][n_embd]
  l.n_floats[kWo] = n_layer * n_embd * n_embd;    // [n_layer][n_embd][n_embd]
  l.n_floats[kRmsFfn] = n_layer * n_embd;         // [n_layer][n_embd]
  l.n_floats[kW1] = n_layer * n_ff * n_embd;      // [n_layer][n_ff][n_embd]   gate
  l.n_floats[kW2] = n_layer * n_embd * n_ff;      // [n_layer][n_embd][n_ff]   down
  l.n_floats[kW3] = n_layer * n_ff * n_embd;      // [n_layer][n_ff][n_embd]   up
  l.n_floats[kRmsFinal] = n_embd;                 // [n_embd]
  l.n_floats[kFreqCisReal] = c.seq_len * c.head_dim() / 2;  // [seq_len][head_dim/2]
  l.n_floats[kFreqCisImag] = c.seq_len * c.head_dim() / 2;  // [seq_len][head_dim/2]
  l.n_floats[kWcls] = c.shared_classifier ? 0 : n_vocab * n_embd;  // [n_vocab][n_embd]
  int64_t off = 0;
  for (int r = 0; r < kNumRegions; ++r) {
    l.offset[r] = off;
    off += l.n_floats[r];
  }
  l.total_floats = off;
  return l;
}

// Checks the payload size against the layout, naming the first region that runs past the end.
Status check_payload_size(const Llama2cConfig& c, const Layout& l, size_t file_bytes) {
  const uint64_t expected = kHeaderBytes + static_cast<uint64_t>(l.total_floats) * 4;
  if (file_bytes < expected) {
    for (int r = 0; r < kNumRegions; ++r) {
      const uint64_t begin = kHeaderBytes + static_cast<uint64_t>(l.offset[r]) * 4;
      const uint64_t end = begin + static_cast<uint64_t>(l.n_floats[r]) * 4;
      if (end > file_bytes) {
        return Status::Error(strprintf(
            "llama2.c checkpoint truncated: %s needs bytes [%llu, %llu) but the file has %zu "
            "bytes (expected %llu in all for %s)",
            region_name(r), static_cast<unsigned long long>(begin),
            static_cast<unsigned long long>(end), file_bytes,
            static_cast<unsigned long long>(expected), describe(c).c_str()));
      }
    }
  }
  if (file_bytes > expected) {
    return Status::Error(strprintf(
        "llama2.c checkpoint has %llu unexpected bytes after the last tensor: expected exactly "
        "%llu bytes for %s, found %zu (header does not match the weights?)",
        static_cast<unsigned long long>(file_bytes - expected),
        static_cast<unsigned long long>(expected), describe(c).c_str(), file_bytes));
  }
  return Status::Ok();
}

Status check_range(const char* field, int32_t v, int32_t max) {
  if (v <= 0 || v > max) {
    return Status::Error(
        strprintf("llama2.c header: %s = %d, expected 1..%d", field, v, max));
  }
  return Status::Ok();
}

// llama.cpp's converter classifies tokens in this order; the special ids get fixed texts
// because llama2.c's tokenizer.bin stores them as "<unk>", "\n<s>\n", "\n</s>\n".
int32_t classify_token(int32_t id, std::string* text) {
  if (id == kLlama2cUnkId) {
    *text = "<unk>";
    return kTokenUnknown;
  }
  if (id == kLlama2cBosId) {
    *text = "<s>";
    return kTokenControl;
  }
  if (id == kLlama2cEosId) {
    *text = "</s>";
    return kTokenControl;
  }
  if (text->empty()) return kTokenControl;
  const std::string& t = *text;
  if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && std::isxdigit(static_cast<uint8_t>(t[3])) &&
      std::isxdigit(static_cast<uint8_t>(t[4])) && t[5] == '>') {
    return kTokenByte;
  }
  return kTokenNormal;
}

// SentencePiece writes spaces as U+2581; llama2.c's export turned them back into ' '.
std::string escape_whitespace(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    if (ch == ' ') {
      out += "\xe2\x96\x81";
    } else {
      out += ch;
    }
  }
  return out;
}

std::string blk(int il, const char* what) {
  return "blk." + std::to_string(il) + "." + what + ".weight";
}

std::vector<ConvertedTensor> build_tensors(const Llama2cConfig& c, const Layout& l) {
  const int64_t n_embd = c.dim, n_ff = c.hidden_dim, n_vocab = c.vocab_size;
  const int64_t n_embd_kv = c.kv_dim();
  std::vector<ConvertedTensor> ts;
  auto add = [&](std::string name, std::vector<int64_t> ne, int64_t offset) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    HC_CHECK(offset >= 0 && offset + n <= l.total_floats);
    ts.push_back({std::move(name), std::move(ne), static_cast<size_t>(offset),
                  static_cast<size_t>(n)});
  };
  add("token_embd.weight", {n_embd, n_vocab}, l.offset[kTokEmbd]);
  add("output_norm.weight", {n_embd}, l.offset[kRmsFinal]);
  add("output.weight", {n_embd, n_vocab},
      c.shared_classifier ? l.offset[kTokEmbd] : l.offset[kWcls]);
  for (int il = 0; il < c.n_layers; ++il) {
    add(blk(il, "attn_q"), {n_embd, n_embd}, l.offset[kWq] + il * n_embd * n_embd);
    add(blk(il, "attn_k"), {n_embd, n_embd_kv}, l.offset[kWk] + il * n_embd_kv * n_embd);
    add(blk(il, "attn_v"), {n_embd, n_embd_kv}, l.offset[kWv] + il * n_embd_kv * n_embd);
    add(blk(il, "attn_output"), {n_embd, n_embd}, l.offset[kWo] + il * n_embd * n_embd);
    add(blk(il, "attn_norm"), {n_embd}, l.offset[kRmsAtt] + il * n_embd);
    add(blk(il, "ffn_gate"), {n_embd, n_ff}, l.offset[kW1] + il * n_ff * n_embd);
    add(blk(il, "ffn_down"), {n_ff, n_embd}, l.offset[kW2] + il * n_embd * n_ff);
    add(blk(il, "ffn_up"), {n_embd, n_ff}, l.offset[kW3] + il * n_ff * n_embd);
    add(blk(il, "ffn_norm"), {n_embd}, l.offset[kRmsFfn] + il * n_embd);
  }
  return ts;
}

}  // namespace

Result<Llama2cConfig> parse_llama2c_config(std::span<const uint8_t> model_bin) {
  if (model_bin.size() < kHeaderBytes) {
    return Status::Error(strprintf(
        "llama2.c checkpoint is %zu bytes, too short for the %zu-byte header", model_bin.size(),
        kHeaderBytes));
  }
  const uint8_t* p = model_bin.data();
  if (static_cast<uint32_t>(read_i32(p)) == kLlama2cV1Magic) {
    return Status::Error(
        "llama2.c checkpoint starts with magic 'ak42' (export version >= 1); only the legacy "
        "v0 export (7 int32 header + fp32 weights) is supported");
  }
  Llama2cConfig c;
  c.dim = read_i32(p + 0);
  c.hidden_dim = read_i32(p + 4);
  c.n_layers = read_i32(p + 8);
  c.n_heads = read_i32(p + 12);
  c.n_kv_heads = read_i32(p + 16);
  const int32_t raw_vocab = read_i32(p + 20);
  c.seq_len = read_i32(p + 24);
  c.shared_classifier = raw_vocab > 0;
  // -INT32_MIN overflows; map it to something the range check rejects.
  c.vocab_size = raw_vocab == INT32_MIN ? 0 : (raw_vocab < 0 ? -raw_vocab : raw_vocab);

  HC_TRY(check_range("dim", c.dim, kMaxDim));
  HC_TRY(check_range("hidden_dim", c.hidden_dim, kMaxHiddenDim));
  HC_TRY(check_range("n_layers", c.n_layers, kMaxLayers));
  HC_TRY(check_range("n_heads", c.n_heads, c.dim));
  HC_TRY(check_range("n_kv_heads", c.n_kv_heads, c.n_heads));
  HC_TRY(check_range("|vocab_size|", c.vocab_size, kMaxVocab));
  HC_TRY(check_range("seq_len", c.seq_len, kMaxSeqLen));
  if (c.dim % c.n_heads != 0) {
    return Status::Error(strprintf("llama2.c header: dim = %d is not a multiple of n_heads = %d",
                                   c.dim, c.n_heads));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return Status::Error(strprintf(
        "llama2.c header: n_heads = %d is not a multiple of n_kv_heads = %d", c.n_heads,
        c.n_kv_heads));
  }
  if (c.head_dim() % 2 != 0) {
    return Status::Error(strprintf(
        "llama2.c header: head_dim = dim / n_heads = %lld is odd; RoPE rotates pairs",
        static_cast<long long>(c.head_dim())));
  }
  if (c.vocab_size <= kLlama2cEosId) {
    return Status::Error(strprintf(
        "llama2.c header: vocab_size = %d, expected at least 3 (<unk>, <s>, </s>)",
        c.vocab_size));
  }
  return c;
}

Result<Llama2cVocab> parse_llama2c_tokenizer(std::span<const uint8_t> bytes, int32_t n_vocab) {
  if (n_vocab <= 0) {
    return Status::Error(strprintf("llama2.c tokenizer: n_vocab = %d, expected > 0", n_vocab));
  }
  if (bytes.size() < 4) {
    return Status::Error(strprintf(
        "llama2.c tokenizer is %zu bytes, too short for the int32 max_token_length",
        bytes.size()));
  }
  Llama2cVocab v;
  v.max_token_length = read_i32(bytes.data());
  if (v.max_token_length < 0 || v.max_token_length > kMaxTokenBytes) {
    return Status::Error(strprintf("llama2.c tokenizer: max_token_length = %d, expected 0..%d",
                                   v.max_token_length, kMaxTokenBytes));
  }
  v.tokens.reserve(n_vocab);
  v.scores.reserve(n_vocab);
  v.token_types.reserve(n_vocab);
  size_t pos = 4;
  for (int32_t id = 0; id < n_vocab; ++id) {
    if (bytes.size() - pos < 8) {
      return Status::Error(strprintf(
          "llama2.c tokenizer truncated: token %d of %d needs its score and length at byte %zu, "
          "file has %zu bytes",
          id, n_vocab, pos, bytes.size()));
    }
    const float score = read_f32(bytes.data() + pos);
    const int32_t len = read_i32(bytes.data() + pos + 4);
    pos += 8;
    if (len < 0 || len > kMaxTokenBytes) {
      return Status::Error(strprintf("llama2.c tokenizer: token %d has length %d, expected 0..%d",
                                     id, len, kMaxTokenBytes));
    }
    if (bytes.size() - pos < static_cast<size_t>(len)) {
      return Status::Error(strprintf(
          "llama2.c tokenizer truncated: token %d of %d needs %d bytes at byte %zu, file has %zu "
          "bytes",
          id, n_vocab, len, pos, bytes.size()));
    }
    std::string text(reinterpret_cast<const char*>(bytes.data() + pos), len);
    pos += len;
    const int32_t type = classify_token(id, &text);
    v.tokens.push_back(escape_whitespace(text));
    v.scores.push_back(score);
    v.token_types.push_back(type);
  }
  if (pos != bytes.size()) {
    return Status::Error(strprintf(
        "llama2.c tokenizer has %zu bytes left after %d tokens (the checkpoint's vocab_size): "
        "tokenizer and model do not match",
        bytes.size() - pos, n_vocab));
  }
  return v;
}

const ConvertedTensor* ConvertedModel::find_tensor(const std::string& tensor_name) const {
  for (const ConvertedTensor& t : tensors) {
    if (t.name == tensor_name) return &t;
  }
  return nullptr;
}

GgufWriter ConvertedModel::make_writer() const {
  const Llama2cConfig& c = config;
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  w.set("general.name", GgufValue::str(name));
  w.set("general.file_type", GgufValue::u32(0));  // LLAMA_FTYPE_ALL_F32
  w.set("llama.context_length", GgufValue::u32(c.seq_len));
  w.set("llama.embedding_length", GgufValue::u32(c.dim));
  w.set("llama.block_count", GgufValue::u32(c.n_layers));
  w.set("llama.feed_forward_length", GgufValue::u32(c.hidden_dim));
  w.set("llama.attention.head_count", GgufValue::u32(c.n_heads));
  w.set("llama.attention.head_count_kv", GgufValue::u32(c.n_kv_heads));
  // llama2.c rotates the whole head (llama.cpp's converter caps this at 64, which only
  // differs for head_dim > 64, where it would not match llama2.c's own forward pass).
  w.set("llama.rope.dimension_count", GgufValue::u32(static_cast<uint32_t>(c.head_dim())));
  w.set("llama.attention.layer_norm_rms_epsilon", GgufValue::f32(1e-5f));
  w.set("tokenizer.ggml.model", GgufValue::str("llama"));
  w.set("tokenizer.ggml.tokens", GgufValue::str_array(vocab.tokens));
  w.set("tokenizer.ggml.scores", GgufValue::f32_array(vocab.scores));
  w.set("tokenizer.ggml.token_type", GgufValue::i32_array(vocab.token_types));
  w.set("tokenizer.ggml.unknown_token_id", GgufValue::u32(kLlama2cUnkId));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(kLlama2cBosId));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(kLlama2cEosId));
  for (const ConvertedTensor& t : tensors) {
    const std::span<const float> data = tensor_data(t);
    w.add_tensor({t.name, t.ne, GgmlType::F32,
                  std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()),
                                           data.size_bytes())});
  }
  return w;
}

Status ConvertedModel::write_gguf(const std::string& path) const {
  return make_writer().write_file(path);
}

Result<ConvertedModel> convert_llama2c(std::span<const uint8_t> model_bin,
                                       std::span<const uint8_t> tokenizer_bin) {
  HC_ASSIGN_OR_RETURN(Llama2cConfig c, parse_llama2c_config(model_bin));
  const Layout layout = payload_layout(c);
  HC_TRY(check_payload_size(c, layout, model_bin.size()));
  HC_ASSIGN_OR_RETURN(Llama2cVocab vocab, parse_llama2c_tokenizer(tokenizer_bin, c.vocab_size));

  ConvertedModel m;
  m.config = c;
  m.vocab = std::move(vocab);
  try {
    m.weights.resize(static_cast<size_t>(layout.total_floats));
  } catch (const std::bad_alloc&) {
    return Status::Error(strprintf("out of memory allocating %lld floats for %s",
                                   static_cast<long long>(layout.total_floats),
                                   describe(c).c_str()));
  }
  std::memcpy(m.weights.data(), model_bin.data() + kHeaderBytes, m.weights.size() * 4);
  m.tensors = build_tensors(c, layout);
  return m;
}

}  // namespace hc
