// Chat prompt formatting without a Jinja interpreter, the way llama.cpp's llama_chat_apply_template
// does it: the model's tokenizer.chat_template string is classified by marker substrings
// (llm_chat_detect_template) and a hand-written formatter renders the messages.
//
// Supported families (llama.cpp names): chatml, llama2, llama2-sys, llama2-sys-bos,
// llama2-sys-strip, llama3. A family name may be passed instead of a template string.
// The output does not include the BOS token: the tokenizer adds it.
#pragma once
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace hc {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

// Family names that apply_chat_template can render.
const std::vector<std::string>& supported_chat_templates();

// Resolves a family name or a template string to a family name. Errors name the detected
// family when it is known but not supported, and list the supported ones.
Result<std::string> detect_chat_template(const std::string& template_str_or_name);

// Renders msgs; add_generation_prompt appends the assistant header where the family has one
// (llama2 has none: its prompt already ends with "[/INST]").
Result<std::string> apply_chat_template(const std::string& template_str_or_name,
                                        std::span<const ChatMessage> msgs,
                                        bool add_generation_prompt);

}  // namespace hc
