// SmolLM2-135M-Instruct's tokenizer (byte-level BPE, pre-tokenizer "smollm"), from the real
// model file when scripts/setup.sh has unpacked it; skipped otherwise. Expected ids come from
// llama.cpp (llama-cpp-python 0.3.36) on the same file.
#include <cstdlib>
#include <filesystem>

#include "tokenizer_test_util.h"

namespace hc {
namespace {

using Ids = std::vector<int32_t>;

std::string model_path() {
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") +
         "/.cache/hotcold/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

class SmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(model_path())) return;
    Result<Tokenizer> tok = test::load_tokenizer(model_path());
    ASSERT_TRUE(tok.ok()) << tok.message();
    tok_ = new Tokenizer(std::move(tok).value());
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (!tok_) GTEST_SKIP() << model_path() << " not found (scripts/setup.sh unpacks it)";
  }
  static Tokenizer* tok_;
};
Tokenizer* SmolLM2::tok_ = nullptr;

TEST_F(SmolLM2, Metadata) {
  EXPECT_EQ(tok_->model_name(), "gpt2");
  EXPECT_EQ(tok_->pre_name(), "smollm");
  EXPECT_EQ(tok_->n_vocab(), 49152);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_EQ(tok_->eot_id(), 0);  // <|endoftext|>: llama.cpp's pick among the EOT candidates
  EXPECT_FALSE(tok_->add_bos());
  EXPECT_FALSE(tok_->add_eos());
  for (int32_t id = 0; id < tok_->n_vocab(); ++id) {
    EXPECT_EQ(tok_->is_eog(id), id == 0 || id == 2 || id == 4) << id;  // 4: <reponame> (FIM)
  }
}

TEST_F(SmolLM2, ChatMarkupParsesAsSpecialTokens) {
  const std::string chat = "<|im_start|>user\nHi there<|im_end|>\n";
  EXPECT_EQ(tok_->encode(chat, true, true), (Ids{1, 4093, 198, 26843, 665, 2, 198}));
  EXPECT_EQ(tok_->encode(chat, true, false), (Ids{44, 108, 306, 79, 3738, 108, 46, 4093, 198, 26843,
                                                  665, 44, 108, 306, 79, 486, 108, 46, 198}));
  EXPECT_EQ(tok_->encode(" <|im_start|> x", false, true), (Ids{216, 1, 1792}));
  const Ids ids = tok_->encode("<|im_start|>user\nHi<|im_end|>", false, true);
  EXPECT_EQ(tok_->decode(ids), "user\nHi");
  EXPECT_EQ(tok_->decode(ids, true), "<|im_start|>user\nHi<|im_end|>");
  EXPECT_EQ(tok_->encode("Hello world", true, true), (Ids{19556, 905}));
}

TEST_F(SmolLM2, RoundTripsVariedText) {
  for (const std::string& text : test::round_trip_texts()) {
    EXPECT_EQ(tok_->decode(tok_->encode(text, false, false)), text);
    EXPECT_EQ(tok_->decode(tok_->encode(text, true, true), true), text);
  }
}

TEST_F(SmolLM2, RoundTripsRealCorpora) {
  for (const char* rel : {"data/tinyshakespeare/input.txt", "data/wikitext-2/wiki.test.raw",
                          "data/mbpp/mbpp.jsonl"}) {
    const std::string path = test::shared_path(rel);
    if (!std::filesystem::exists(path)) continue;
    const std::string text = test::read_text_file(path).substr(0, 200000);
    const Ids ids = tok_->encode(text, false, false);
    EXPECT_LT(ids.size(), text.size()) << rel;  // it compresses
    EXPECT_EQ(tok_->decode(ids), text) << rel;
  }
}

}  // namespace
}  // namespace hc
