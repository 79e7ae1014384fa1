#include "engine/chat_template.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hc {
namespace {

// The conversation of llama.cpp's test-chat-template, so expected strings can be compared
// with llama.cpp's (non-Jinja) outputs.
const std::vector<ChatMessage> kChat = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};

// tokenizer.chat_template of SmolLM2-135M-Instruct (the project's real test model).
const char* kSmolLM2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

const char* kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

// Llama-2-chat style: strips contents (-> llama2-sys-strip).
const char* kLlama2Chat =
    "{% if messages[0]['role'] == 'system' %}{% set system_message = messages[0]['content'] %}"
    "{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + "
    "' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + ' ' + "
    "eos_token }}{% endif %}{% endfor %}";

// Mistral-7B-Instruct-v0.2 style: [INST] without <<SYS>> (-> llama2).
const char* kMistralV02 =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token}}{% endif %}{% endfor %}";

std::string apply(const std::string& tmpl, bool add_ass = true) {
  Result<std::string> r = apply_chat_template(tmpl, kChat, add_ass);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? *r : "";
}

TEST(ChatTemplate, DetectsFamiliesByMarkers) {
  EXPECT_EQ(detect_chat_template(kSmolLM2).value(), "chatml");
  EXPECT_EQ(detect_chat_template(kLlama3).value(), "llama3");
  EXPECT_EQ(detect_chat_template(kLlama2Chat).value(), "llama2-sys-strip");
  EXPECT_EQ(detect_chat_template(kMistralV02).value(), "llama2");
  EXPECT_EQ(detect_chat_template("{{ '[INST] <<SYS>>\\n' }}").value(), "llama2-sys");
  EXPECT_EQ(detect_chat_template("{{ bos_token + '[INST] ' + x }} <<SYS>>").value(),
            "llama2-sys-bos");
  for (const std::string& name : supported_chat_templates()) {
    EXPECT_EQ(detect_chat_template(name).value(), name);
  }
}

TEST(ChatTemplate, ChatMLMatchesLlamaCpp) {
  EXPECT_EQ(apply(kSmolLM2),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
            "<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\nHi there<|im_end|>\n"
            "<|im_start|>user\nWho are you<|im_end|>\n"
            "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n"
            "<|im_start|>user\nAnother question<|im_end|>\n"
            "<|im_start|>assistant\n");
  const std::vector<ChatMessage> one = {{"user", "Hi"}};
  EXPECT_EQ(apply_chat_template("chatml", one, false).value(),
            "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, Llama3MatchesLlamaCpp) {
  EXPECT_EQ(apply(kLlama3),
            "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const std::string no_gen = apply("llama3", false);
  EXPECT_EQ(no_gen.substr(no_gen.size() - 26), "Another question<|eot_id|>");
}

TEST(ChatTemplate, Llama2VariantsMatchLlamaCpp) {
  EXPECT_EQ(apply(kMistralV02),
            "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>"
            "[INST] Who are you [/INST]   I am an assistant   </s>"
            "[INST] Another question [/INST]");
  EXPECT_EQ(apply("llama2-sys"),
            "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>"
            "[INST] Who are you [/INST]   I am an assistant   </s>"
            "[INST] Another question [/INST]");
  EXPECT_EQ(apply("llama2-sys-bos"),
            "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>"
            "<s>[INST] Who are you [/INST]   I am an assistant   </s>"
            "<s>[INST] Another question [/INST]");
  EXPECT_EQ(apply(kLlama2Chat),
            "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>"
            "[INST] Who are you [/INST]I am an assistant</s>"
            "[INST] Another question [/INST]");
  // No generation prompt exists for llama2: the flag changes nothing.
  EXPECT_EQ(apply("llama2-sys", false), apply("llama2-sys", true));
}

TEST(ChatTemplate, UnknownOrUnsupportedTemplatesAreClearErrors) {
  Result<std::string> r = apply_chat_template("{{ messages }}", kChat, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("unrecognised chat template"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("chatml, llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip, "
                             "llama3"),
            std::string::npos)
      << r.message();

  r = apply_chat_template("{{ '<start_of_turn>' + role }}", kChat, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("looks like 'gemma'"), std::string::npos) << r.message();

  // <|im_start|> with <|im_sep|> is phi4, not chatml (llama.cpp's rule).
  r = detect_chat_template("<|im_start|>{{ role }}<|im_sep|>");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("'phi4'"), std::string::npos) << r.message();

  r = apply_chat_template("", kChat, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("no chat template"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace hc
