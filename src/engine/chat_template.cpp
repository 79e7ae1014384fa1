#include "engine/chat_template.h"

#include <algorithm>

namespace hc {
namespace {

bool contains(const std::string& s, const char* needle) {
  return s.find(needle) != std::string::npos;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string supported_list() {
  std::string out;
  for (const std::string& n : supported_chat_templates()) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

// llama.cpp's llm_chat_detect_template, in its order, up to and including llama3: the
// families tested before llama3 are kept so that a template matching several marker sets
// is classified exactly as llama.cpp would. Returns "" when nothing matches.
std::string detect_family(const std::string& t) {
  if (contains(t, "<|im_start|>")) {
    if (contains(t, "<|im_sep|>")) return "phi4";
    if (contains(t, "<end_of_utterance>")) return "smolvlm";  // <|im_start|> as BOS, not chatml
    return "chatml";
  }
  if (t.rfind("mistral", 0) == 0 || contains(t, "[INST]")) {
    if (contains(t, "[SYSTEM_PROMPT]")) return "mistral-v7";
    if (contains(t, "' [INST] ' + system_message") || contains(t, "[AVAILABLE_TOOLS]")) {
      if (contains(t, " [INST]")) return "mistral-v1";
      if (contains(t, "\"[INST]\"")) return "mistral-v3-tekken";
      return "mistral-v3";
    }
    if (contains(t, "content.strip()")) return "llama2-sys-strip";
    if (contains(t, "bos_token + '[INST]")) return "llama2-sys-bos";
    if (contains(t, "<<SYS>>")) return "llama2-sys";
    return "llama2";
  }
  if (contains(t, "<|assistant|>") && contains(t, "<|end|>")) return "phi3";
  if (contains(t, "[gMASK]<sop>")) return "chatglm4";
  if (contains(t, "<|assistant|>") && contains(t, "<|user|>")) {
    return contains(t, "</s>") ? "falcon3" : "glmedge";
  }
  if (contains(t, "<|{{ item['role'] }}|>") && contains(t, "<|begin_of_image|>")) return "glmedge";
  if (contains(t, "<|user|>") && contains(t, "<|endoftext|>")) return "zephyr";
  if (contains(t, "bos_token + message['role']")) return "monarch";
  if (contains(t, "<start_of_turn>")) return "gemma";
  if (contains(t, "'\\n\\nAssistant: ' + eos_token")) return "orion";
  if (contains(t, "GPT4 Correct ")) return "openchat";
  if (contains(t, "USER: ") && contains(t, "ASSISTANT: ")) {
    return contains(t, "SYSTEM: ") ? "vicuna-orca" : "vicuna";
  }
  if (contains(t, "### Instruction:") && contains(t, "<|EOT|>")) return "deepseek";
  if (contains(t, "<|START_OF_TURN_TOKEN|>") && contains(t, "<|USER_TOKEN|>")) return "command-r";
  if (contains(t, "<|start_header_id|>") && contains(t, "<|end_header_id|>")) return "llama3";
  if (contains(t, "<|header_start|>") && contains(t, "<|header_end|>")) return "llama4";
  return "";
}

std::string render_chatml(std::span<const ChatMessage> msgs, bool add_ass) {
  std::string out;
  for (const ChatMessage& m : msgs) {
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
  if (add_ass) out += "<|im_start|>assistant\n";
  return out;
}

std::string render_llama3(std::span<const ChatMessage> msgs, bool add_ass) {
  std::string out;
  for (const ChatMessage& m : msgs) {
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) +
           "<|eot_id|>";
  }
  if (add_ass) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// https://huggingface.co/blog/llama2#how-to-prompt-llama-2 and llama.cpp's variants: the
// "-sys" ones wrap the system prompt in <<SYS>>, "-bos" repeats <s> before each later turn,
// "-strip" trims every message. The first turn's BOS is left to the tokenizer.
std::string render_llama2(const std::string& family, std::span<const ChatMessage> msgs) {
  const bool sys = family != "llama2";
  const bool bos_inside = family == "llama2-sys-bos";
  const bool strip = family == "llama2-sys-strip";
  std::string out = "[INST] ";
  bool inside_turn = true;
  for (const ChatMessage& m : msgs) {
    const std::string content = strip ? trim(m.content) : m.content;
    if (!inside_turn) {
      inside_turn = true;
      out += bos_inside ? "<s>[INST] " : "[INST] ";
    }
    if (m.role == "system") {
      // Without <<SYS>> support the system prompt still goes first, as plain text.
      out += sys ? "<<SYS>>\n" + content + "\n<</SYS>>\n\n" : content + "\n";
    } else if (m.role == "user") {
      out += content + " [/INST]";
    } else {
      out += content + "</s>";
      inside_turn = false;
    }
  }
  return out;
}

}  // namespace

const std::vector<std::string>& supported_chat_templates() {
  static const std::vector<std::string> kNames = {
      "chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "llama3"};
  return kNames;
}

Result<std::string> detect_chat_template(const std::string& tmpl) {
  if (tmpl.empty()) {
    return Status::Error("no chat template given (the model has no tokenizer.chat_template?); "
                         "name one of: " + supported_list());
  }
  const std::vector<std::string>& names = supported_chat_templates();
  if (std::find(names.begin(), names.end(), tmpl) != names.end()) return tmpl;
  const std::string family = detect_family(tmpl);
  if (family.empty()) {
    return Status::Error("unrecognised chat template (no known markers such as <|im_start|>, "
                         "[INST] or <|start_header_id|>); supported: " + supported_list());
  }
  if (std::find(names.begin(), names.end(), family) == names.end()) {
    return Status::Error("chat template looks like '" + family +
                         "', which is not supported; supported: " + supported_list());
  }
  return family;
}

Result<std::string> apply_chat_template(const std::string& template_str_or_name,
                                        std::span<const ChatMessage> msgs,
                                        bool add_generation_prompt) {
  HC_ASSIGN_OR_RETURN(const std::string family, detect_chat_template(template_str_or_name));
  if (family == "chatml") return render_chatml(msgs, add_generation_prompt);
  if (family == "llama3") return render_llama3(msgs, add_generation_prompt);
  return render_llama2(family, msgs);
}

}  // namespace hc
