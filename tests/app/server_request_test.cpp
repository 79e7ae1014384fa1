// Request validation of `hotcold serve` (app/server.h) without sockets.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../model/tiny_model.h"
#include "app/server.h"
#include "format/gguf.h"

namespace hc {
namespace {

class ServerRequest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TinyModel tm(testing::TinyModelSpec{});
    bytes_ = tm.bytes();
    model_ = testing::load_tiny(bytes_, false);
    ASSERT_TRUE(model_);
    info_.model = model_.get();
    info_.id = "tiny";
    info_.file_name = "tiny-model.gguf";
    info_.chat_template = "chatml";
    info_.n_ctx_slot = 32;
  }
  CompletionRequest ok(const std::string& body, bool chat = false) {
    auto r = parse_completion_request(body, chat, info_);
    if (auto* e = std::get_if<ApiError>(&r)) {
      ADD_FAILURE() << body << " -> " << e->message;
      return {};
    }
    return std::get<CompletionRequest>(r);
  }
  ApiError err(const std::string& body, bool chat = false) {
    auto r = parse_completion_request(body, chat, info_);
    if (auto* e = std::get_if<ApiError>(&r)) return *e;
    ADD_FAILURE() << body << " was accepted";
    return {};
  }
  std::vector<uint8_t> bytes_;
  std::shared_ptr<const LlamaModel> model_;
  ApiModelInfo info_;
};

TEST_F(ServerRequest, CompletionDefaultsFollowOpenAiAndLlamaCpp) {
  const CompletionRequest r = ok(R"({"prompt": "abc"})");
  EXPECT_FALSE(r.chat);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.prompt, model_->tokenizer().encode("abc", true, true));
  EXPECT_EQ(r.prompt.front(), 1);  // BOS, as hotcold run adds it
  EXPECT_EQ(r.gen.max_tokens, 16);
  EXPECT_FLOAT_EQ(r.gen.sampling.temp, 0.8f);
  EXPECT_EQ(r.gen.sampling.top_k, 40);
}

TEST_F(ServerRequest, FieldsAreRead) {
  const CompletionRequest r = ok(R"({"prompt": ["abc"], "model": "tiny-model", "max_tokens": 7,
      "temperature": 0, "top_p": 0.5, "top_k": 3, "min_p": 0, "seed": 99, "stop": ["x", "yz"],
      "stream": true, "stream_options": {"include_usage": true}, "presence_penalty": 0.5,
      "frequency_penalty": -0.5, "repeat_penalty": 1.1, "ignore_eos": true, "n": 1,
      "logprobs": null, "user": "someone"})");
  EXPECT_EQ(r.gen.max_tokens, 7);
  EXPECT_EQ(r.gen.sampling.temp, 0.0f);
  EXPECT_FLOAT_EQ(r.gen.sampling.top_p, 0.5f);
  EXPECT_EQ(r.gen.sampling.top_k, 3);
  EXPECT_EQ(r.gen.sampling.seed, 99u);
  EXPECT_EQ(r.gen.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_TRUE(r.stream && r.include_usage && r.gen.ignore_eos);
  EXPECT_FLOAT_EQ(r.gen.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.gen.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.gen.sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(ok(R"({"prompt": [1, 5, 6]})").prompt, (std::vector<int32_t>{1, 5, 6}));
  EXPECT_EQ(ok(R"({"prompt": "a", "max_completion_tokens": 3})").gen.max_tokens, 3);
  EXPECT_EQ(r.gen.logprobs, -1);  // null: none
  EXPECT_TRUE(r.gen.cache_prompt);
  EXPECT_FALSE(ok(R"({"prompt": "a", "cache_prompt": false})").gen.cache_prompt);
}

TEST_F(ServerRequest, LogprobsAsOpenAiAsksForThem) {
  // Completions: an integer (the top candidates per token), or llama.cpp's n_probs.
  EXPECT_EQ(ok(R"({"prompt": "a", "logprobs": 3})").gen.logprobs, 3);
  EXPECT_EQ(ok(R"({"prompt": "a", "logprobs": 0})").gen.logprobs, 0);
  EXPECT_EQ(ok(R"({"prompt": "a", "logprobs": false})").gen.logprobs, -1);
  EXPECT_EQ(ok(R"({"prompt": "a", "n_probs": 5})").gen.logprobs, 5);
  // Chat: a boolean, with top_logprobs.
  info_.n_ctx_slot = 200;
  const char* msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  EXPECT_EQ(ok(std::string("{") + msgs + R"(, "logprobs": true})", true).gen.logprobs, 0);
  EXPECT_EQ(ok(std::string("{") + msgs + R"(, "logprobs": true, "top_logprobs": 4})", true)
                .gen.logprobs,
            4);
  EXPECT_EQ(ok(std::string("{") + msgs + R"(, "logprobs": false})", true).gen.logprobs, -1);
  EXPECT_NE(err(std::string("{") + msgs + R"(, "top_logprobs": 2})", true)
                .message.find("'top_logprobs' needs 'logprobs': true"),
            std::string::npos);
  EXPECT_NE(err(std::string("{") + msgs + R"(, "logprobs": 3})", true)
                .message.find("'logprobs': expected true or false, found integer"),
            std::string::npos);
  EXPECT_NE(err(R"({"prompt": "a", "logprobs": 21})").message.find("'logprobs': expected an integer in [0, 20]"),
            std::string::npos);
  EXPECT_NE(err(R"({"prompt": "a", "logprobs": "x"})").message.find("'logprobs': expected an integer"),
            std::string::npos);
}

TEST_F(ServerRequest, ChatUsesTheTemplateAndFillsTheContextByDefault) {
  info_.n_ctx_slot = 200;  // the tiny vocabulary spells the template out letter by letter
  const CompletionRequest r = ok(R"({"messages": [{"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "text", "text": "c"}]}]})",
                                 true);
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.gen.max_tokens, 200);
  const std::string rendered =
      "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nabc<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(r.prompt, model_->tokenizer().encode(rendered, true, true));
}

TEST_F(ServerRequest, ErrorsNameTheFieldAndWhatWasFound) {
  struct Case {
    const char* body;
    bool chat;
    int status;
    const char* needle;
  } cases[] = {
      {"{", false, 400, "invalid JSON"},
      {"\"text\"", false, 400, "expected a JSON object as the request body, found string"},
      {R"({"prompt": "a", "max_tokens": true})", false, 400, "'max_tokens': expected an integer, found boolean"},
      {R"({"prompt": "a", "max_tokens": 0})", false, 400, "'max_tokens': expected an integer in [1, "},
      {R"({"prompt": "a", "top_p": 1.5})", false, 400, "'top_p': expected a number in [0, 1], found 1.5"},
      {R"({"prompt": "a", "stop": ["a", 1]})", false, 400, "array element of type integer"},
      {R"({"prompt": "a", "stream_options": 3})", false, 400, "'stream_options': expected an object"},
      {R"({"prompt": "a", "echo": true})", false, 400, "'echo' is not supported"},
      {R"({"prompt": "a", "model": "other"})", false, 404, "model 'other' not found: this server serves 'tiny'"},
      {R"({"prompt": "a", "model": 5})", false, 400, "'model': expected a string"},
      {R"({"prompt": ["a", "b"]})", false, 400, "only one prompt per request"},
      {R"({"prompt": [0.5]})", false, 400, "'prompt': expected a string or an array of token ids"},
      {R"({"prompt": [-1]})", false, 400, "token ids must be integers in [0, 40)"},
      {R"({"prompt": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"})", false, 400,
       "a slot's context holds 32"},
      {R"({"messages": [1]})", true, 400, "'messages[0]': expected an object, found integer"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", true, 400, "needs a string 'text'"},
  };
  for (const Case& c : cases) {
    const ApiError e = err(c.body, c.chat);
    EXPECT_EQ(e.status, c.status) << c.body;
    EXPECT_NE(e.message.find(c.needle), std::string::npos) << c.body << " -> " << e.message;
  }
}

TEST_F(ServerRequest, ModelNamesAccepted) {
  for (const char* name : {"tiny", "tiny-model", "tiny-model.gguf", ""})
    ok(std::string(R"({"prompt": "a", "model": ")") + name + "\"}");
}

TEST(ServerErrorJson, HasTheLlamaCppShapeAndIsValidUtf8) {
  const std::string j = error_json({400, "invalid_request_error", "bad \xFF byte"});
  EXPECT_EQ(j, "{\"error\":{\"code\":400,\"message\":\"bad \xEF\xBF\xBD byte\",\"type\":\"invalid_request_error\"}}");
}

// POST /tokenize and /detokenize (llama.cpp server's fields and defaults).
TEST_F(ServerRequest, TokenizeAndDetokenize) {
  const Tokenizer& tok = model_->tokenizer();
  auto body = [](const std::variant<std::string, ApiError>& r) {
    if (auto* e = std::get_if<ApiError>(&r)) {
      ADD_FAILURE() << e->message;
      return nlohmann::json();
    }
    return nlohmann::json::parse(std::get<std::string>(r));
  };
  // Defaults: no BOS (add_special false), special tokens parsed.
  const std::vector<int32_t> want = tok.encode("abc </s>", false, true);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(body(tokenize_response(R"({"content": "abc </s>"})", info_))["tokens"]
                .get<std::vector<int32_t>>(),
            want);
  EXPECT_EQ(want.back(), 2);  // </s> parsed as the special token
  EXPECT_EQ(body(tokenize_response(R"({"content": "abc", "add_special": true})", info_))["tokens"]
                .get<std::vector<int32_t>>(),
            tok.encode("abc", true, true));
  EXPECT_NE(body(tokenize_response(R"({"content": "</s>", "parse_special": false})", info_))
                ["tokens"].get<std::vector<int32_t>>(),
            tok.encode("</s>", false, true));
  EXPECT_EQ(body(tokenize_response(R"({})", info_))["tokens"].size(), 0u);
  const auto pieces = body(tokenize_response(R"({"content": "abc", "with_pieces": true})", info_));
  const std::vector<int32_t> ids = tok.encode("abc", false, true);
  ASSERT_EQ(pieces["tokens"].size(), ids.size());
  std::string joined;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(pieces["tokens"][i]["id"].get<int32_t>(), ids[i]);
    EXPECT_EQ(pieces["tokens"][i]["piece"].get<std::string>(), tok.token_to_piece(ids[i], true));
    joined += tok.token_to_piece(ids[i], true);
  }
  // Detokenize: the pieces concatenated (llama.cpp's tokens_to_str), special tokens as text.
  nlohmann::json d = {{"tokens", ids}};
  EXPECT_EQ(body(detokenize_response(d.dump(), info_))["content"].get<std::string>(), joined);
  EXPECT_EQ(body(detokenize_response(R"({"tokens": [2]})", info_))["content"].get<std::string>(),
            tok.token_to_piece(2, true));
  EXPECT_EQ(body(detokenize_response(R"({})", info_))["content"].get<std::string>(), "");
  // Bad input: a 400 naming the field.
  struct Case {
    bool tokenize;
    const char* body;
    const char* msg;
  };
  for (const Case& c : {Case{true, R"({"content": 5})", "'content': expected a string"},
                        Case{true, R"({"content": "a", "add_special": "yes"})", "'add_special'"},
                        Case{true, "not json", "invalid JSON"},
                        Case{true, "[1]", "expected a JSON object"},
                        Case{false, R"({"tokens": "abc"})", "'tokens': expected an array"},
                        Case{false, R"({"tokens": [1, 40]})", "'tokens[1]': expected a token id in [0, 40), found 40"},
                        Case{false, R"({"tokens": [-1]})", "found -1"},
                        Case{false, R"({"tokens": [1.5]})", "'tokens[0]'"}}) {
    const auto r = c.tokenize ? tokenize_response(c.body, info_) : detokenize_response(c.body, info_);
    const auto* e = std::get_if<ApiError>(&r);
    ASSERT_NE(e, nullptr) << c.body;
    EXPECT_EQ(e->status, 400) << c.body;
    EXPECT_NE(e->message.find(c.msg), std::string::npos) << c.body << ": " << e->message;
  }
}

}  // namespace
}  // namespace hc
