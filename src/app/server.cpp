#include "app/server.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "core/log.h"
#include "core/module.h"
#include "engine/chat_template.h"
#include "engine/text_stream.h"

namespace hc {

using json = nlohmann::json;

namespace {

ApiError bad_request(std::string msg) { return {400, "invalid_request_error", std::move(msg)}; }

std::string type_name(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "number";
  return v.type_name();
}

// Field readers: absent or null keeps the default; a wrong type or range is an error naming
// the field, what was expected and what was found.
std::optional<ApiError> read_int(const json& j, const char* key, int64_t lo, int64_t hi,
                                 int64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer())
    return bad_request(std::string("'") + key + "': expected an integer, found " + type_name(*it));
  const int64_t v = it->is_number_unsigned()
                        ? static_cast<int64_t>(std::min<uint64_t>(it->get<uint64_t>(), INT64_MAX))
                        : it->get<int64_t>();
  if (v < lo || v > hi)
    return bad_request(std::string("'") + key + "': expected an integer in [" +
                       std::to_string(lo) + ", " + std::to_string(hi) + "], found " +
                       std::to_string(v));
  *out = v;
  return std::nullopt;
}

std::optional<ApiError> read_num(const json& j, const char* key, double lo, double hi,
                                 float* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number())
    return bad_request(std::string("'") + key + "': expected a number, found " + type_name(*it));
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) {
    std::ostringstream os;
    os << "'" << key << "': expected a number in [" << lo << ", " << hi << "], found " << v;
    return bad_request(os.str());
  }
  *out = static_cast<float>(v);
  return std::nullopt;
}

std::optional<ApiError> read_bool(const json& j, const char* key, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean())
    return bad_request(std::string("'") + key + "': expected true or false, found " + type_name(*it));
  *out = it->get<bool>();
  return std::nullopt;
}

// Log probabilities, as OpenAI's API asks for them: completions `logprobs` (an integer: the top
// candidates per token; llama.cpp's `n_probs` too), chat `logprobs` (a boolean) with
// `top_logprobs` (an integer, only with logprobs). *out: the candidates, or -1 for none.
constexpr int64_t kMaxTopLogprobs = 20;
std::optional<ApiError> read_logprobs(const json& j, bool chat, int* out) {
  int64_t k = -1;
  if (chat) {
    bool on = false;
    if (auto e = read_bool(j, "logprobs", &on)) return e;
    if (auto e = read_int(j, "top_logprobs", 0, kMaxTopLogprobs, &k)) return e;
    if (k >= 0 && !on) return bad_request("'top_logprobs' needs 'logprobs': true");
    if (on) k = std::max<int64_t>(k, 0);
  } else {
    for (const char* key : {"logprobs", "n_probs"}) {
      auto it = j.find(key);
      if (it != j.end() && it->is_boolean()) {  // false: none; true: the token's own only
        if (it->get<bool>()) k = std::max<int64_t>(k, 0);
        continue;
      }
      if (auto e = read_int(j, key, 0, kMaxTopLogprobs, &k)) return e;
    }
  }
  *out = static_cast<int>(k);
  return std::nullopt;
}


std::optional<ApiError> read_stop(const json& j, std::vector<std::string>* out) {
  auto it = j.find("stop");
  if (it == j.end() || it->is_null()) return std::nullopt;
  constexpr size_t kMaxStops = 16, kMaxStopBytes = 256;
  std::vector<std::string> v;
  if (it->is_string()) {
    v.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    for (const json& s : *it) {
      if (!s.is_string())
        return bad_request("'stop': expected a string or an array of strings, found an array element of type " + type_name(s));
      v.push_back(s.get<std::string>());
    }
  } else {
    return bad_request("'stop': expected a string or an array of strings, found " + type_name(*it));
  }
  if (v.size() > kMaxStops)
    return bad_request("'stop': at most " + std::to_string(kMaxStops) + " stop strings, found " +
                       std::to_string(v.size()));
  for (const std::string& s : v)
    if (s.size() > kMaxStopBytes)
      return bad_request("'stop': a stop string may have at most " + std::to_string(kMaxStopBytes) +
                         " bytes, found " + std::to_string(s.size()));
  *out = std::move(v);
  return std::nullopt;
}

// Chat message content: a string, null, or an array of {"type": "text", "text": ...} parts.
std::optional<ApiError> read_content(const json& m, size_t i, std::string* out) {
  auto it = m.find("content");
  const std::string where = "'messages[" + std::to_string(i) + "].content'";
  if (it == m.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    *out = it->get<std::string>();
    return std::nullopt;
  }
  if (!it->is_array())
    return bad_request(where + ": expected a string or an array of text parts, found " + type_name(*it));
  for (const json& part : *it) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return bad_request(where + ": expected parts like {\"type\": \"text\", \"text\": \"...\"}");
    if (part["type"] != "text")
      return bad_request(where + ": only text parts are supported, found type '" +
                         part["type"].get<std::string>() + "'");
    if (!part.contains("text") || !part["text"].is_string())
      return bad_request(where + ": a text part needs a string 'text'");
    *out += part["text"].get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> check_model(const json& j, const ApiModelInfo& info) {
  auto it = j.find("model");
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_string())
    return bad_request("'model': expected a string, found " + type_name(*it));
  const std::string name = it->get<std::string>();
  std::string stem = info.file_name;
  if (stem.size() > 5 && stem.ends_with(".gguf")) stem.resize(stem.size() - 5);
  if (name.empty() || name == info.id || name == info.file_name || name == stem)
    return std::nullopt;
  return ApiError{404, "not_found_error",
                  "model '" + name + "' not found: this server serves '" + info.id + "'"};
}

std::variant<json, ApiError> parse_object(std::string_view body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    return bad_request(std::string("invalid JSON in the request body: ") + e.what());
  }
  if (!j.is_object())
    return bad_request("expected a JSON object as the request body, found " + type_name(j));
  return j;
}

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string error_json(const ApiError& e) {
  return dump_json({{"error", {{"code", e.status}, {"message", e.message}, {"type", e.type}}}});
}

std::variant<std::string, ApiError> tokenize_response(std::string_view body,
                                                      const ApiModelInfo& info) {
  auto parsed = parse_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  bool add_special = false, parse_special = true, with_pieces = false;
  for (auto [key, out] : {std::pair{"add_special", &add_special}, {"parse_special", &parse_special},
                          {"with_pieces", &with_pieces}})
    if (auto e = read_bool(j, key, out)) return *e;
  std::string content;
  if (auto it = j.find("content"); it != j.end() && !it->is_null()) {
    if (!it->is_string())
      return bad_request("'content': expected a string, found " + type_name(*it));
    content = it->get<std::string>();
  }
  const Tokenizer& tok = info.model->tokenizer();
  const std::vector<int32_t> ids = tok.encode(content, add_special, parse_special);
  json tokens = json::array();
  for (int32_t id : ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string piece = tok.token_to_piece(id, /*special=*/true);
    json p;
    if (utf8_valid(piece)) {
      p = piece;
    } else {
      p = json::array();
      for (unsigned char c : piece) p.push_back(static_cast<int>(c));
    }
    tokens.push_back({{"id", id}, {"piece", p}});
  }
  return dump_json({{"tokens", tokens}});
}

std::variant<std::string, ApiError> detokenize_response(std::string_view body,
                                                        const ApiModelInfo& info) {
  auto parsed = parse_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  const Tokenizer& tok = info.model->tokenizer();
  std::string content;
  if (auto it = j.find("tokens"); it != j.end() && !it->is_null()) {
    if (!it->is_array())
      return bad_request("'tokens': expected an array of token ids, found " + type_name(*it));
    for (size_t i = 0; i < it->size(); ++i) {
      const json& v = (*it)[i];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok.n_vocab())
        return bad_request("'tokens[" + std::to_string(i) + "]': expected a token id in [0, " +
                           std::to_string(tok.n_vocab()) + "), found " +
                           (v.is_number_integer() ? std::to_string(v.get<int64_t>())
                                                  : type_name(v)));
      content += tok.token_to_piece(static_cast<int32_t>(v.get<int64_t>()), /*special=*/true);
    }
  }
  return dump_json({{"content", content}});
}

std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body,
                                                                   bool chat,
                                                                   const ApiModelInfo& info) {
  auto parsed = parse_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  if (auto e = check_model(j, info)) return *e;

  CompletionRequest r;
  r.chat = chat;
  const Tokenizer& tok = info.model->tokenizer();
  int64_t n = 1;
  if (auto e = read_int(j, "n", 1, 1, &n)) {
    e->message += " (only one choice per request is supported)";
    return *e;
  }
  {
    auto it = j.find("echo");
    if (it != j.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>()))
      return bad_request("'echo' is not supported");
  }
  if (auto e = read_logprobs(j, chat, &r.gen.logprobs)) return *e;
  if (auto e = read_bool(j, "stream", &r.stream)) return *e;
  if (auto it = j.find("stream_options"); it != j.end() && !it->is_null()) {
    if (!it->is_object())
      return bad_request("'stream_options': expected an object, found " + type_name(*it));
    if (auto e = read_bool(*it, "include_usage", &r.include_usage)) return *e;
  }

  // Sampling: llama.cpp's defaults where OpenAI's API says nothing (as hotcold run).
  SamplerParams& sp = r.gen.sampling;
  if (auto e = read_num(j, "temperature", 0.0, 5.0, &sp.temp)) return *e;
  if (auto e = read_num(j, "top_p", 0.0, 1.0, &sp.top_p)) return *e;
  if (auto e = read_num(j, "min_p", 0.0, 1.0, &sp.min_p)) return *e;
  if (auto e = read_num(j, "presence_penalty", -2.0, 2.0, &sp.presence_penalty)) return *e;
  if (auto e = read_num(j, "frequency_penalty", -2.0, 2.0, &sp.frequency_penalty)) return *e;
  if (auto e = read_num(j, "repeat_penalty", 0.0, 10.0, &sp.repeat_penalty)) return *e;
  int64_t top_k = sp.top_k;
  if (auto e = read_int(j, "top_k", 0, INT32_MAX, &top_k)) return *e;
  sp.top_k = static_cast<int>(top_k);
  int64_t seed = -1;
  if (auto e = read_int(j, "seed", INT64_MIN, INT64_MAX, &seed)) return *e;
  if (seed == -1) {
    std::random_device rd;
    sp.seed = (uint64_t{rd()} << 32) ^ rd();
  } else {
    sp.seed = static_cast<uint64_t>(seed);
  }
  if (auto e = read_stop(j, &r.gen.stop)) return *e;
  if (auto e = read_bool(j, "ignore_eos", &r.gen.ignore_eos)) return *e;
  if (auto e = read_bool(j, "cache_prompt", &r.gen.cache_prompt)) return *e;

  int64_t max_tokens = chat ? info.n_ctx_slot : 16;  // OpenAI: 16 for completions
  for (const char* key : {"max_tokens", "max_completion_tokens", "n_predict"})
    if (auto e = read_int(j, key, 1, 1 << 24, &max_tokens)) return *e;
  r.gen.max_tokens = static_cast<int>(max_tokens);

  // The prompt.
  if (chat) {
    auto it = j.find("messages");
    if (it == j.end() || it->is_null()) return bad_request("'messages' is required");
    if (!it->is_array())
      return bad_request("'messages': expected an array of messages, found " + type_name(*it));
    if (it->empty()) return bad_request("'messages' is empty: expected at least one message");
    std::vector<ChatMessage> msgs;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& m = (*it)[i];
      const std::string where = "'messages[" + std::to_string(i) + "]'";
      if (!m.is_object()) return bad_request(where + ": expected an object, found " + type_name(m));
      auto role = m.find("role");
      if (role == m.end() || !role->is_string())
        return bad_request(where + ": expected a string 'role'");
      std::string rs = role->get<std::string>();
      if (rs == "developer") rs = "system";  // OpenAI's newer name for the system role
      if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool")
        return bad_request(where + ": unknown role '" + rs +
                           "' (expected system, developer, user, assistant or tool)");
      ChatMessage cm{rs, {}};
      if (auto e = read_content(m, i, &cm.content)) return *e;
      msgs.push_back(std::move(cm));
    }
    auto rendered = apply_chat_template(info.chat_template, msgs, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return ApiError{500, "server_error", rendered.message()};
    r.prompt = tok.encode(*rendered, true, true);
  } else {
    auto it = j.find("prompt");
    if (it == j.end() || it->is_null()) return bad_request("'prompt' is required");
    const json* p = &*it;
    if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
    if (p->is_string()) {
      const std::string text = p->get<std::string>();
      if (text.empty()) return bad_request("'prompt' is empty: expected some text");
      r.prompt = tok.encode(text, true, true);
    } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
      for (const json& t : *p) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.n_vocab())
          return bad_request("'prompt': token ids must be integers in [0, " +
                             std::to_string(tok.n_vocab()) + ")");
        r.prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
    } else if (p->is_array() && p->empty()) {
      return bad_request("'prompt' is empty: expected some text");
    } else if (p->is_array() && p->size() > 1 && (*p)[0].is_string()) {
      return bad_request("'prompt': only one prompt per request is supported, found " +
                         std::to_string(p->size()));
    } else {
      return bad_request("'prompt': expected a string or an array of token ids, found " + type_name(*p));
    }
    if (r.prompt.empty()) {
      if (tok.bos_id() < 0) return bad_request("'prompt' tokenizes to nothing");
      r.prompt.push_back(tok.bos_id());
    }
  }
  if (static_cast<int64_t>(r.prompt.size()) >= info.n_ctx_slot)
    return bad_request("the prompt is " + std::to_string(r.prompt.size()) +
                       " tokens but a slot's context holds " + std::to_string(info.n_ctx_slot) +
                       " (shorten the prompt, or raise -c / lower --parallel)");
  return r;
}

// ---- the HTTP module -----------------------------------------------------------------------

namespace {

// The module beside the running binary, opened once (core/module.h).
Result<HttpServerFactory> http_module() {
  static std::mutex mu;
  static HttpServerFactory factory = nullptr;
  std::lock_guard<std::mutex> lk(mu);
  if (factory) return factory;
  auto sym = open_module_entry(kHttpModuleFile, kHttpModuleEntry, "HTTP server module",
                               "hotcold serve needs it beside the binary; the build makes both");
  if (!sym.ok()) return sym.status();
  factory = reinterpret_cast<HttpServerFactory>(*sym);  // kept open: the servers' code lives there
  return factory;
}

}  // namespace

Status load_http_module() { return http_module().status(); }

Result<std::unique_ptr<HttpServer>> open_http_server(HttpServerConfig cfg) {
  HC_ASSIGN_OR_RETURN(HttpServerFactory create, http_module());
  std::string error;
  HttpServer* srv = create(kHttpModuleAbi, sizeof(HttpServerConfig), &cfg, &error);
  if (!srv) return Status::Error(error.empty() ? "the HTTP server module failed" : error);
  return std::unique_ptr<HttpServer>(srv);
}

}  // namespace hc
