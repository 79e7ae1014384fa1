// Tokenizer behaviour beyond the conformance strings: BOS/EOS, special-token parsing, pieces,
// decoding, round trips, and clear errors for bad vocabulary metadata. Expected ids come from
// llama.cpp (llama-cpp-python 0.3.36) on the same files.
#include <algorithm>
#include <string>
#include <vector>

#include "tokenizer_test_util.h"

namespace hc {
namespace {

using Ids = std::vector<int32_t>;

TEST(SpmVocab, MetadataAndSpecialIds) {
  const Tokenizer& tok = test::conformance_tokenizer("llama-spm");
  EXPECT_EQ(tok.model_name(), "llama");
  EXPECT_EQ(tok.pre_name(), "default");
  EXPECT_EQ(tok.n_vocab(), 32000);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.eot_id(), -1);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_FALSE(tok.add_eos());
  EXPECT_TRUE(tok.is_eog(2));
  EXPECT_FALSE(tok.is_eog(1));
  EXPECT_FALSE(tok.is_eog(-1));
  EXPECT_EQ(tok.token_id("\xe2\x96\x81Hello"), 15043);
  EXPECT_EQ(tok.token_id("no such token"), -1);
  EXPECT_EQ(tok.token_text(15043), "\xe2\x96\x81Hello");
}

TEST(SpmVocab, EncodeAddsBosAndSpacePrefix) {
  const Tokenizer& tok = test::conformance_tokenizer("llama-spm");
  EXPECT_EQ(tok.encode("Hello world", true, false), (Ids{1, 15043, 3186}));
  EXPECT_EQ(tok.encode("Hello world", false, false), (Ids{15043, 3186}));
  EXPECT_EQ(tok.encode(" Hello", true, false), (Ids{1, 29871, 15043}));
  EXPECT_EQ(tok.encode("\n", false, false), (Ids{29871, 13}));
  EXPECT_EQ(tok.encode("", true, false), (Ids{1}));
  EXPECT_EQ(tok.encode("", false, false), Ids{});
}

TEST(SpmVocab, ControlTokensOnlyParsedWhenAsked) {
  const Tokenizer& tok = test::conformance_tokenizer("llama-spm");
  EXPECT_EQ(tok.encode("<s>Hi</s>", true, false),
            (Ids{1, 529, 29879, 29958, 18567, 829, 29879, 29958}));
  EXPECT_EQ(tok.encode("<s>Hi</s>", true, true), (Ids{1, 1, 6324, 2}));
  EXPECT_EQ(tok.encode("<s>Hi</s>", false, true), (Ids{1, 6324, 2}));
}

TEST(SpmVocab, PiecesAndDecode) {
  const Tokenizer& tok = test::conformance_tokenizer("llama-spm");
  EXPECT_EQ(tok.token_to_piece(15043, false), " Hello");  // U+2581 -> space
  EXPECT_EQ(tok.token_to_piece(13, false), "\n");         // <0x0A>
  EXPECT_EQ(tok.token_to_piece(1, false), "");            // control hidden ...
  EXPECT_EQ(tok.token_to_piece(1, true), "<s>");          // ... unless asked for
  EXPECT_EQ(tok.token_to_piece(0, true), "<unk>");
  EXPECT_EQ(tok.token_to_piece(-1, true), "");
  EXPECT_EQ(tok.token_to_piece(32000, true), "");
  // llama_detokenize strips the space SPM adds, from the first token only: a leading BOS
  // takes that turn (as in llama.cpp).
  EXPECT_EQ(tok.decode(Ids{15043, 3186}), "Hello world");
  EXPECT_EQ(tok.decode(Ids{1, 15043, 3186}), " Hello world");
  EXPECT_EQ(tok.decode(Ids{1, 15043, 3186}, true), "<s> Hello world");
}

TEST(Phi3Vocab, SpecialTokensEatFollowingWhitespace) {
  // llama.cpp marks phi-3's special tokens RSTRIP (except <s>, <unk>, <|endoftext|>).
  const Tokenizer& tok = test::conformance_tokenizer("phi-3");
  EXPECT_EQ(tok.encode("<|user|>\nHello<|end|>\n<|assistant|>", true, true),
            (Ids{1, 32010, 15043, 32007, 32001}));
  EXPECT_EQ(tok.encode("Hello <|end|>   x </s>  y", true, true),
            (Ids{1, 15043, 29871, 32007, 921, 29871, 2, 343}));
  EXPECT_EQ(
      tok.encode("Hello <|end|>   x </s>  y", true, false),
      (Ids{1, 15043, 529, 29989, 355, 29989, 29958, 259, 921, 1533, 29879, 29958, 29871, 343}));
  EXPECT_EQ(tok.eos_id(), 32000);
  EXPECT_EQ(tok.eot_id(), 32007);  // <|end|>, found by text as llama.cpp does
  EXPECT_TRUE(tok.is_eog(2));
  EXPECT_TRUE(tok.is_eog(32000));
  EXPECT_TRUE(tok.is_eog(32007));
  EXPECT_FALSE(tok.is_eog(32001));
  EXPECT_EQ(tok.token_to_piece(2, false), "");  // </s> became a control token (EOG)
  EXPECT_EQ(tok.token_to_piece(32007, true), "<|end|>");
}

TEST(DeepseekCoderVocab, UserDefinedTokensAlwaysSplitOut) {
  const Tokenizer& tok = test::conformance_tokenizer("deepseek-coder");
  EXPECT_EQ(tok.pre_name(), "deepseek-coder");
  // 'ü' is a user-defined token, so it is split out even without parse_special.
  EXPECT_EQ(tok.encode("F\xc3\xbchrer", false, false), (Ids{37, 32009, 71, 6247}));
  const std::string text =
      "F\xc3\xbchrer <|User|> hi<\xef\xbd\x9c"
      "fim\xe2\x96\x81"
      "begin\xef\xbd\x9c>x"
      "<\xef\xbd\x9c"
      "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
  EXPECT_EQ(tok.encode(text, true, true),
            (Ids{32013, 37, 32009, 71, 6247, 207, 32019, 2856, 32016, 87, 32014}));
  // The FIM / EOS tokens are control tokens (FIM found by text), so not split without it.
  const Ids plain = tok.encode(text, true, false);
  EXPECT_EQ(plain.front(), 32013);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 32016), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 32019), 1);  // <|User|> is user-defined
  EXPECT_EQ(tok.decode(plain), text.substr(0));
}

TEST(Gpt2Vocab, DecodeCleansSpacesLikeLlamaCpp) {
  const Tokenizer& tok = test::conformance_tokenizer("gpt-2");
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.bos_id(), 50256);
  const std::string text = "Hello , world ! I ' m here . It 's you 're";
  const Ids ids = tok.encode(text, true, false);
  EXPECT_EQ(ids,
            (Ids{15496, 837, 995, 5145, 314, 705, 285, 994, 764, 632, 705, 82, 345, 705, 260}));
  EXPECT_EQ(tok.decode(ids), "Hello, world! I'm here. It's you're");
  // llama.cpp's second pass leaves a NUL marker that stops the next " ' " from matching.
  EXPECT_EQ(tok.decode(tok.encode("a ' ' b", false, false)), "a'' b");
  EXPECT_EQ(tok.token_to_piece(18435, false), " Hello");  // byte-level: U+0120 -> space
  EXPECT_EQ(tok.token_to_piece(50256, false), "");
  EXPECT_EQ(tok.token_to_piece(50256, true), "<|endoftext|>");
}

TEST(Gpt2Vocab, ParsesEndOfTextOnlyWhenAsked) {
  const Tokenizer& tok = test::conformance_tokenizer("gpt-2");
  EXPECT_EQ(tok.encode("a<|endoftext|>b", false, true), (Ids{64, 50256, 65}));
  const Ids plain = tok.encode("a<|endoftext|>b", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0);
  EXPECT_EQ(tok.decode(plain), "a<|endoftext|>b");
}

TEST(RoundTrip, SpmVocabulary) {
  for (const char* name : {"llama-spm", "phi-3"}) {
    const Tokenizer& tok = test::conformance_tokenizer(name);
    for (const std::string& text : test::round_trip_texts()) {
      EXPECT_EQ(tok.decode(tok.encode(text, false, false)), text) << name;
      // With BOS (shown as text), the prefix space stays: llama.cpp's detokenize behaviour.
      EXPECT_EQ(tok.decode(tok.encode(text, true, false), true), "<s> " + text) << name;
    }
  }
}

TEST(RoundTrip, BpeVocabularyWithoutSpaceCleanup) {
  const Tokenizer& tok = test::conformance_tokenizer("deepseek-coder");
  for (const std::string& text : test::round_trip_texts()) {
    const Ids ids = tok.encode(text, false, false);
    EXPECT_EQ(tok.decode(ids), text);
    std::string pieces;
    for (const int32_t id : ids) pieces += tok.token_to_piece(id, false);
    EXPECT_EQ(pieces, text);
  }
}

// --- Qwen2's vocabulary (llama.cpp's ggml-vocab-qwen2.gguf, unpacked by scripts/setup.sh) ---

// The qwen2 vocabulary with tokenizer.ggml.pre replaced by `pre`.
Result<Tokenizer> load_qwen2_as(const std::string& pre) {
  HC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(test::conformance_path("qwen2")));
  HC_ASSIGN_OR_RETURN(GgufFile gguf, parse_gguf(file.bytes()));
  for (auto& [key, value] : gguf.kv) {
    if (key == "tokenizer.ggml.pre") value = GgufValue::str(pre);
  }
  return Tokenizer::from_gguf(gguf);
}

TEST(Qwen2Vocab, MetadataAndSpecialIds) {
  ASSERT_EQ(test::missing_conformance_files("qwen2"), "");  // fails naming the setup step
  const Tokenizer& tok = test::conformance_tokenizer("qwen2");
  EXPECT_EQ(tok.model_name(), "gpt2");
  EXPECT_EQ(tok.pre_name(), "qwen2");
  EXPECT_EQ(tok.n_vocab(), 151936);
  EXPECT_EQ(tok.bos_id(), 151643);  // <|endoftext|>, from the metadata (as is EOS)
  EXPECT_EQ(tok.eos_id(), 151643);
  EXPECT_EQ(tok.eot_id(), 151645);  // <|im_end|>, found by its text
  EXPECT_FALSE(tok.add_bos());      // no tokenizer.ggml.add_bos_token; qwen2 leaves it off
  EXPECT_FALSE(tok.add_eos());
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    // 128247: "</s>", a normal-type token that llama.cpp makes control and end-of-generation.
    EXPECT_EQ(tok.is_eog(id), id == 128247 || id == 151643 || id == 151645) << id;
  }
}

TEST(Qwen2Vocab, ChatMarkupAndUserDefinedTokens) {
  ASSERT_EQ(test::missing_conformance_files("qwen2"), "");
  const Tokenizer& tok = test::conformance_tokenizer("qwen2");
  const std::string chat = "<|im_start|>user\nHi there<|im_end|>\n";
  EXPECT_EQ(tok.encode(chat, true, true), (Ids{151644, 872, 198, 13048, 1052, 151645, 198}));
  EXPECT_EQ(tok.encode(chat, true, false),
            (Ids{27, 91, 318, 4906, 91, 29, 872, 198, 13048, 1052, 27, 91, 318, 6213, 91, 397}));
  // [PAD151650] is user-defined: split out without parse_special. Digits go one by one.
  EXPECT_EQ(tok.encode("x[PAD151650]y 2024", false, false),
            (Ids{87, 151650, 88, 220, 17, 15, 17, 19}));
  const Ids ids = tok.encode("<|im_start|>user\nHi<|im_end|>", false, true);
  EXPECT_EQ(ids, (Ids{151644, 872, 198, 13048, 151645}));
  EXPECT_EQ(tok.decode(ids), "user\nHi");
  EXPECT_EQ(tok.decode(ids, true), "<|im_start|>user\nHi<|im_end|>");
}

TEST(Qwen2Vocab, AliasesAndSpaceCleanup) {
  ASSERT_EQ(test::missing_conformance_files("qwen2"), "");
  // llama.cpp: qwen2 and its aliases, and hunyuan / solar-open (same regex), set clean_spaces
  // off; megrez (also LLAMA_VOCAB_PRE_TYPE_QWEN2) and stablelm2 (same regex) keep it on.
  const std::string text = "Hello , world . It 's ok ' ' here ? 1234567 I'M\r\n\r\n";
  const Ids want = {9707, 1154, 1879, 659, 1084, 364, 82, 5394, 364, 364,   1588, 937,
                    220,  16,   17,   18,  19,   20,  21, 22,   358, 27603, 871};
  for (const char* pre : {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open",
                          "megrez", "stablelm2"}) {
    Result<Tokenizer> tok = load_qwen2_as(pre);
    ASSERT_TRUE(tok.ok()) << pre << ": " << tok.message();
    EXPECT_FALSE(tok->add_bos()) << pre;
    const Ids ids = tok->encode(text, true, false);
    EXPECT_EQ(ids, want) << pre;
    const bool cleans = std::string(pre) == "megrez" || std::string(pre) == "stablelm2";
    EXPECT_EQ(tok->decode(ids), cleans ? "Hello, world. It's ok'' here? 1234567 I'M\r\n\r\n" : text)
        << pre;
  }
}

TEST(Qwen2Vocab, RoundTrips) {
  ASSERT_EQ(test::missing_conformance_files("qwen2"), "");
  const Tokenizer& tok = test::conformance_tokenizer("qwen2");
  for (const std::string& text : test::round_trip_texts()) {
    EXPECT_EQ(tok.decode(tok.encode(text, false, false)), text);
    EXPECT_EQ(tok.decode(tok.encode(text, true, true), true), text);
  }
}

// --- metadata errors, on small synthetic vocabularies ---

GgufFile spm_gguf() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    scores.push_back(0);
    types.push_back(6);
  }
  const std::vector<std::pair<std::string, float>> normal = {{"\xe2\x96\x81", -1},
                                                             {"a", -2},
                                                             {"b", -2},
                                                             {"c", -2},
                                                             {"ab", -5},
                                                             {"bc", -3},
                                                             {"\xe2\x96\x81"
                                                              "a",
                                                              -4},
                                                             {"abc", -1}};
  for (const auto& [text, score] : normal) {
    tokens.push_back(text);
    scores.push_back(score);
    types.push_back(1);
  }
  GgufFile g;
  g.kv.emplace_back("general.name", GgufValue::str("tiny-spm"));
  g.kv.emplace_back("tokenizer.ggml.model", GgufValue::str("llama"));
  g.kv.emplace_back("tokenizer.ggml.tokens", GgufValue::str_array(tokens));
  g.kv.emplace_back("tokenizer.ggml.scores", GgufValue::f32_array(scores));
  g.kv.emplace_back("tokenizer.ggml.token_type", GgufValue::i32_array(types));
  return g;
}

void set_kv(GgufFile* g, const std::string& key, GgufValue v) {
  for (auto& kv : g->kv) {
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  }
  g->kv.emplace_back(key, std::move(v));
}

void erase_kv(GgufFile* g, const std::string& key) {
  std::erase_if(g->kv, [&](const auto& kv) { return kv.first == key; });
}

std::string load_error(const GgufFile& g) {
  Result<Tokenizer> tok = Tokenizer::from_gguf(g);
  return tok.ok() ? std::string("(loaded)") : tok.message();
}

TEST(SyntheticSpm, MergesHighestScoreFirst) {
  Result<Tokenizer> tok = Tokenizer::from_gguf(spm_gguf());
  ASSERT_TRUE(tok.ok()) << tok.message();
  const int32_t space = tok->token_id("\xe2\x96\x81");
  const int32_t abc = tok->token_id("abc");
  // "▁abc": bc (-3) beats ▁a (-4) and ab (-5); then a+bc = abc (-1); ▁abc is no token.
  EXPECT_EQ(tok->encode("abc", false, false), (Ids{space, abc}));
  // Characters with no token fall back to their UTF-8 bytes.
  EXPECT_EQ(tok->encode("\xc3\xa9", false, false), (Ids{space, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok->decode(tok->encode("\xc3\xa9 abc", false, false)), "\xc3\xa9 abc");
}

TEST(SyntheticSpm, AddSpacePrefixCanBeTurnedOff) {
  GgufFile g = spm_gguf();
  set_kv(&g, "tokenizer.ggml.add_space_prefix", GgufValue::boolean(false));
  Result<Tokenizer> tok = Tokenizer::from_gguf(g);
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ(tok->encode("abc", false, false), (Ids{tok->token_id("abc")}));
  EXPECT_EQ(tok->decode(Ids{tok->token_id("\xe2\x96\x81"), tok->token_id("abc")}), " abc");
}

TEST(SyntheticSpm, AddEosFollowsMetadata) {
  GgufFile g = spm_gguf();
  set_kv(&g, "tokenizer.ggml.add_eos_token", GgufValue::boolean(true));
  set_kv(&g, "tokenizer.ggml.add_bos_token", GgufValue::boolean(false));
  Result<Tokenizer> tok = Tokenizer::from_gguf(g);
  ASSERT_TRUE(tok.ok()) << tok.message();
  const Ids ids = tok->encode("abc", true, false);
  ASSERT_FALSE(ids.empty());
  EXPECT_NE(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
}

TEST(SyntheticSpm, BadMetadataIsAClearError) {
  {
    GgufFile g = spm_gguf();
    erase_kv(&g, "tokenizer.ggml.model");
    EXPECT_NE(load_error(g).find("tokenizer.ggml.model"), std::string::npos) << load_error(g);
  }
  {
    GgufFile g = spm_gguf();
    set_kv(&g, "tokenizer.ggml.model", GgufValue::str("bert"));
    EXPECT_NE(load_error(g).find("unsupported tokenizer model 'bert'"), std::string::npos)
        << load_error(g);
  }
  {
    GgufFile g = spm_gguf();
    erase_kv(&g, "tokenizer.ggml.tokens");
    EXPECT_NE(load_error(g).find("tokenizer.ggml.tokens"), std::string::npos) << load_error(g);
  }
  {
    GgufFile g = spm_gguf();
    set_kv(&g, "tokenizer.ggml.scores", GgufValue::f32_array({0.0f, 1.0f}));
    EXPECT_NE(load_error(g).find("2 scores for 267 tokens"), std::string::npos) << load_error(g);
  }
  {
    GgufFile g = spm_gguf();
    set_kv(&g, "tokenizer.ggml.token_type", GgufValue::f32_array({1.0f}));
    EXPECT_NE(load_error(g).find("tokenizer.ggml.token_type"), std::string::npos) << load_error(g);
  }
  {
    GgufFile g = spm_gguf();
    set_kv(&g, "tokenizer.ggml.tokens", GgufValue::str_array({"a", "b", "a"}));
    erase_kv(&g, "tokenizer.ggml.scores");
    erase_kv(&g, "tokenizer.ggml.token_type");
    EXPECT_NE(load_error(g).find("duplicate token 'a' at ids 0 and 2"), std::string::npos)
        << load_error(g);
  }
  {
    GgufFile g = spm_gguf();
    set_kv(&g, "tokenizer.ggml.bos_token_id", GgufValue::str("one"));
    EXPECT_NE(load_error(g).find("tokenizer.ggml.bos_token_id"), std::string::npos)
        << load_error(g);
  }
  {
    // One token only: the default BOS id 1 does not exist, so add_bos cannot be honoured.
    GgufFile g = spm_gguf();
    set_kv(&g, "tokenizer.ggml.tokens", GgufValue::str_array({"x"}));
    erase_kv(&g, "tokenizer.ggml.scores");
    erase_kv(&g, "tokenizer.ggml.token_type");
    EXPECT_NE(load_error(g).find("add_bos_token is true"), std::string::npos) << load_error(g);
  }
}

TEST(SyntheticBpe, BadMetadataIsAClearError) {
  GgufFile g;
  g.kv.emplace_back("tokenizer.ggml.model", GgufValue::str("gpt2"));
  g.kv.emplace_back("tokenizer.ggml.pre", GgufValue::str("gpt-2"));
  g.kv.emplace_back("tokenizer.ggml.tokens", GgufValue::str_array({"a", "b", "ab"}));
  EXPECT_NE(load_error(g).find("tokenizer.ggml.merges: missing"), std::string::npos)
      << load_error(g);
  g.kv.emplace_back("tokenizer.ggml.merges", GgufValue::str_array({"a b"}));
  set_kv(&g, "tokenizer.ggml.pre", GgufValue::str("qwen35"));
  EXPECT_NE(load_error(g).find("unsupported pre-tokenizer 'qwen35'"), std::string::npos)
      << load_error(g);
  set_kv(&g, "tokenizer.ggml.pre", GgufValue::str("gpt-2"));
  Result<Tokenizer> tok = Tokenizer::from_gguf(g);
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ(tok->encode("ab", false, false), (Ids{2}));
  EXPECT_EQ(tok->encode("ba", false, false), (Ids{1, 0}));
  EXPECT_EQ(tok->bos_id(), -1);  // llama.cpp's default BOS (11) is outside this vocabulary
  set_kv(&g, "tokenizer.ggml.add_eos_token", GgufValue::boolean(true));
  EXPECT_NE(load_error(g).find("add_eos_token is true"), std::string::npos) << load_error(g);
}

// Merges are looked up by token id pairs, with their texts as the fallback for merges naming a
// text that is no token: llama.cpp keys them by text, so "ab" + "c" still merges below although
// "ab" is not in the vocabulary.
TEST(SyntheticBpe, MergesOfTextsThatAreNotTokens) {
  GgufFile g;
  g.kv.emplace_back("tokenizer.ggml.model", GgufValue::str("gpt2"));
  g.kv.emplace_back("tokenizer.ggml.pre", GgufValue::str("gpt-2"));
  g.kv.emplace_back("tokenizer.ggml.tokens", GgufValue::str_array({"a", "b", "c", "abc", "bc"}));
  g.kv.emplace_back("tokenizer.ggml.merges",
                    GgufValue::str_array({"a b", "ab c", "b c", "nospace", "a b"}));
  Result<Tokenizer> tok = Tokenizer::from_gguf(g);
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ(tok->encode("abc", false, false), (Ids{3}));
  EXPECT_EQ(tok->encode("ab", false, false), (Ids{0, 1}));  // "ab" is no token: its bytes
  EXPECT_EQ(tok->encode("bc", false, false), (Ids{4}));
  EXPECT_EQ(tok->encode("cbc", false, false), (Ids{2, 4}));
  EXPECT_EQ(tok->token_text(3), "abc");
  EXPECT_EQ(tok->token_id("bc"), 4);
  EXPECT_EQ(tok->token_id("ab"), -1);
}

TEST(SyntheticBpe, EmptyAndDuplicateTokens) {
  GgufFile g;
  g.kv.emplace_back("tokenizer.ggml.model", GgufValue::str("gpt2"));
  g.kv.emplace_back("tokenizer.ggml.pre", GgufValue::str("gpt-2"));
  g.kv.emplace_back("tokenizer.ggml.tokens", GgufValue::str_array({"a", "", "b"}));
  g.kv.emplace_back("tokenizer.ggml.merges", GgufValue::str_array({"a b"}));
  Result<Tokenizer> tok = Tokenizer::from_gguf(g);
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ(tok->token_text(1), "[EMPTY_1]");
  EXPECT_EQ(tok->token_id("[EMPTY_1]"), 1);
  EXPECT_EQ(tok->token_id(""), -1);
  set_kv(&g, "tokenizer.ggml.tokens", GgufValue::str_array({"a", "b", "a"}));
  EXPECT_NE(load_error(g).find("duplicate token 'a' at ids 0 and 2"), std::string::npos)
      << load_error(g);
}

}  // namespace
}  // namespace hc
