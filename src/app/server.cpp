#include "app/server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "app/web_chat.h"
#include "core/log.h"
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

}  // namespace

std::string error_json(const ApiError& e) {
  json j = {{"error", {{"code", e.status}, {"message", e.message}, {"type", e.type}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body,
                                                                   bool chat,
                                                                   const ApiModelInfo& info) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    return bad_request(std::string("invalid JSON in the request body: ") + e.what());
  }
  if (!j.is_object())
    return bad_request("expected a JSON object as the request body, found " + type_name(j));
  if (auto e = check_model(j, info)) return *e;

  CompletionRequest r;
  r.chat = chat;
  const Tokenizer& tok = info.model->tokenizer();
  int64_t n = 1;
  if (auto e = read_int(j, "n", 1, 1, &n)) {
    e->message += " (only one choice per request is supported)";
    return *e;
  }
  for (const char* unsupported : {"logprobs", "echo"}) {
    bool on = false;
    auto it = j.find(unsupported);
    if (it != j.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>()) &&
        !(it->is_number_integer() && it->get<int64_t>() == 0))
      on = true;
    if (on) return bad_request(std::string("'") + unsupported + "' is not supported");
  }
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

// ---- the server ------------------------------------------------------------------------------

struct HttpServer::Impl {
  std::shared_ptr<const LlamaModel> model;
  ServerOptions opts;
  ApiModelInfo info;
  std::unique_ptr<Scheduler> sched;
  httplib::Server svr;
  std::atomic<bool> shutting_down{false};
  std::atomic<uint64_t> next_id{1};
  const std::time_t started_at = std::time(nullptr);

  mutable std::mutex stats_mu;
  std::map<std::pair<std::string, int>, uint64_t> http_counts;  // (route, status) -> count

  void count(const std::string& path, int status) {
    static const char* kRoutes[] = {"/", "/health", "/metrics", "/v1/models", "/v1/completions",
                                    "/v1/chat/completions", "/models", "/completions",
                                    "/chat/completions"};
    std::string route = "other";
    for (const char* r : kRoutes)
      if (path == r) route = r;
    std::lock_guard<std::mutex> lk(stats_mu);
    ++http_counts[{route, status}];
  }

  static void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    if (e.status == 503) res.set_header("Retry-After", "1");
    res.set_content(error_json(e), "application/json; charset=utf-8");
  }

  json usage_json(const GenRequest::Update& u) const {
    return {{"prompt_tokens", u.n_prompt},
            {"completion_tokens", u.n_generated},
            {"total_tokens", u.n_prompt + u.n_generated}};
  }

  // One streamed chunk (or the whole non-streamed body).
  json choice_json(const CompletionRequest& r, const std::string& text, bool stream,
                   const char* finish, bool first) const {
    json c = {{"index", 0}};
    if (r.chat) {
      if (stream) {
        json delta = json::object();
        if (first) delta["role"] = "assistant";
        if (!text.empty() || (first && !finish)) delta["content"] = text;
        c["delta"] = delta;
      } else {
        c["message"] = {{"role", "assistant"}, {"content", text}};
      }
    } else {
      c["text"] = text;
      c["logprobs"] = nullptr;
    }
    c["finish_reason"] = finish ? json(finish) : json(nullptr);
    return c;
  }

  json envelope(const CompletionRequest& r, const std::string& id, bool stream) const {
    const char* object = r.chat ? (stream ? "chat.completion.chunk" : "chat.completion")
                                : "text_completion";
    return {{"id", id}, {"object", object}, {"created", static_cast<int64_t>(std::time(nullptr))},
            {"model", info.id}, {"system_fingerprint", "hotcold"}};
  }

  static std::string dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  }

  // A request that ended without completing: cancelled (shutdown, 503) or failed (500).
  static ApiError early_end_error(const GenRequest::Update& u) {
    if (u.reason == FinishReason::kError) return {500, "server_error", u.error};
    return {503, "unavailable_error", u.error.empty() ? "the request was cancelled" : u.error};
  }
  static bool ended_early(const GenRequest::Update& u) {
    return u.reason == FinishReason::kError || u.reason == FinishReason::kCancelled;
  }

  static const char* finish_name(FinishReason r) {
    return r == FinishReason::kLength ? "length" : "stop";
  }

  void handle_completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    if (shutting_down) return send_error(res, {503, "unavailable_error", "the server is shutting down"});
    auto parsed = parse_completion_request(req.body, chat, info);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
    auto r = std::make_shared<CompletionRequest>(std::move(std::get<CompletionRequest>(parsed)));
    auto gen = std::make_shared<GenRequest>(r->prompt, r->gen);
    switch (sched->submit(gen)) {
      case SubmitResult::kAccepted: break;
      case SubmitResult::kQueueFull:
        return send_error(res, {503, "unavailable_error",
                                "the server is busy: all " + std::to_string(sched->params().n_parallel) +
                                    " slots are in use and " + std::to_string(sched->params().max_queue) +
                                    " requests are waiting (retry later)"});
      case SubmitResult::kShuttingDown:
        return send_error(res, {503, "unavailable_error", "the server is shutting down"});
    }
    // Wait for a slot here, so that a request cancelled while queued still gets its status.
    while (!gen->wait_started(std::chrono::milliseconds(200))) {
    }
    if (gen->done()) {
      const GenRequest::Update u = gen->take(std::chrono::milliseconds(0));
      if (ended_early(u)) return send_error(res, early_end_error(u));
    }
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    if (r->stream) {
      auto first = std::make_shared<bool>(true);
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [this, r, gen, id, first](size_t, httplib::DataSink& sink) {
            GenRequest::Update u = gen->take(std::chrono::milliseconds(100));
            auto send = [&](const json& j) {
              const std::string line = "data: " + dump(j) + "\n\n";
              return sink.write(line.data(), line.size());
            };
            if (!u.text.empty() || (*first && r->chat)) {
              json j = envelope(*r, id, true);
              j["choices"] = json::array({choice_json(*r, u.text, true, nullptr, *first)});
              *first = false;
              if (!send(j)) {
                gen->cancel();  // the client went away
                return false;
              }
            }
            if (!u.done) return true;
            if (ended_early(u)) {
              const std::string line = "data: " + error_json(early_end_error(u)) + "\n\n";
              sink.write(line.data(), line.size());
            } else {
              json j = envelope(*r, id, true);
              j["choices"] = json::array({choice_json(*r, "", true, finish_name(u.reason), false)});
              if (r->include_usage) {
                send(j);
                j = envelope(*r, id, true);
                j["choices"] = json::array();
                j["usage"] = usage_json(u);
              }
              send(j);
            }
            static const std::string kDone = "data: [DONE]\n\n";
            sink.write(kDone.data(), kDone.size());
            sink.done();
            return true;
          },
          [gen](bool) { gen->cancel(); });  // no-op when finished; stops it on an early close
      return;
    }
    // Non-streaming: the body is one JSON value. While generating, a space every second (JSON
    // allows leading whitespace) shows whether the client is still there: a failed write
    // cancels the request.
    res.set_chunked_content_provider(
        "application/json; charset=utf-8",
        [this, r, gen, id, text = std::make_shared<std::string>()](size_t, httplib::DataSink& sink) {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
          GenRequest::Update u;
          while (!u.done && std::chrono::steady_clock::now() < deadline) {
            u = gen->take(std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now()));
            *text += u.text;
          }
          if (!u.done) {
            if (!sink.write(" ", 1)) {
              gen->cancel();
              return false;
            }
            return true;
          }
          std::string body;
          if (ended_early(u)) {
            body = error_json(early_end_error(u));
          } else {
            json j = envelope(*r, id, false);
            j["choices"] = json::array({choice_json(*r, *text, false, finish_name(u.reason), false)});
            j["usage"] = usage_json(u);
            body = dump(j);
          }
          sink.write(body.data(), body.size());
          sink.done();
          return true;
        },
        [gen](bool) { gen->cancel(); });
  }

  std::string metrics() const {
    const SchedulerStats s = sched->stats();
    std::ostringstream o;
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
      o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
        << name << ' ' << v << '\n';
    };
    o << "# HELP hotcold_http_requests_total HTTP requests answered, by route and status.\n"
         "# TYPE hotcold_http_requests_total counter\n";
    {
      std::lock_guard<std::mutex> lk(stats_mu);
      for (const auto& [k, v] : http_counts)
        o << "hotcold_http_requests_total{route=\"" << k.first << "\",status=\"" << k.second
          << "\"} " << v << '\n';
    }
    o << "# HELP hotcold_generation_requests_total Generation requests by outcome.\n"
         "# TYPE hotcold_generation_requests_total counter\n";
    o << "hotcold_generation_requests_total{outcome=\"finished\"} " << s.requests_finished << '\n'
      << "hotcold_generation_requests_total{outcome=\"cancelled\"} " << s.requests_cancelled << '\n'
      << "hotcold_generation_requests_total{outcome=\"rejected\"} " << s.requests_rejected << '\n'
      << "hotcold_generation_requests_total{outcome=\"failed\"} " << s.requests_failed << '\n';
    metric("hotcold_prompt_tokens_total", "counter", "Prompt tokens evaluated.", double(s.prompt_tokens));
    metric("hotcold_generated_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
    metric("hotcold_tokens_per_second", "gauge",
           "Generated tokens per second over the last 10 s, all sessions together.",
           s.recent_tokens_per_second);
    metric("hotcold_decode_tokens_per_second", "gauge",
           "Generated tokens per second of decode time since start.",
           s.decode_seconds > 0 ? double(s.generated_tokens) / s.decode_seconds : 0.0);
    metric("hotcold_prompt_tokens_per_second", "gauge",
           "Prompt tokens per second of prompt time since start.",
           s.prompt_seconds > 0 ? double(s.prompt_tokens) / s.prompt_seconds : 0.0);
    metric("hotcold_decode_batch_size_mean", "gauge", "Mean number of sessions per decode step.",
           s.decode_steps ? double(s.decode_batch_tokens) / double(s.decode_steps) : 0.0);
    metric("hotcold_queue_depth", "gauge", "Requests waiting for a slot.", s.queue_depth);
    metric("hotcold_active_sessions", "gauge", "Slots generating or reading a prompt.", s.active_slots);
    metric("hotcold_slots", "gauge", "Slots (--parallel).", s.n_slots);
    metric("hotcold_ffn_sparsity", "gauge",
           "Share of FFN neuron activations skipped (0 with the dense FFN).", s.sparse.sparsity());
    metric("hotcold_fast_device_neuron_share", "gauge",
           "Share of firing FFN neurons served by the fast device (0: CPU only, no second device).",
           0.0);
    metric("hotcold_kv_cache_bytes", "gauge", "KV cache bytes of all slots.", double(s.kv_bytes));
    metric("hotcold_uptime_seconds", "gauge", "Seconds since the server started.",
           double(std::time(nullptr) - started_at));
    return o.str();
  }

  void routes() {
    svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
      const std::string_view page = web_chat_html();
      res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
    });
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (shutting_down) {
        res.status = 503;
        res.set_content(R"({"status":"shutting down"})", "application/json");
        return;
      }
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    auto models = [this](const httplib::Request&, httplib::Response& res) {
      json m = {{"id", info.id}, {"object", "model"}, {"created", static_cast<int64_t>(started_at)},
                {"owned_by", "hotcold"},
                {"meta", {{"n_ctx_slot", info.n_ctx_slot},
                          {"n_vocab", model->hparams().n_vocab},
                          {"weight_bytes_per_token", model->weight_bytes_per_token()}}}};
      res.set_content(dump({{"object", "list"}, {"data", json::array({m})}}), "application/json");
    };
    svr.Get("/v1/models", models);
    svr.Get("/models", models);
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics(), "text/plain; version=0.0.4; charset=utf-8");
    });
    for (const char* path : {"/v1/completions", "/completions"})
      svr.Post(path, [this](const httplib::Request& q, httplib::Response& s) { handle_completion(q, s, false); });
    for (const char* path : {"/v1/chat/completions", "/chat/completions"})
      svr.Post(path, [this](const httplib::Request& q, httplib::Response& s) { handle_completion(q, s, true); });

    // Anything that reached no handler, or failed inside httplib (413, 400): a JSON error.
    svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;  // a handler's own JSON error
      ApiError e{res.status, res.status >= 500 ? "server_error" : "invalid_request_error", ""};
      switch (res.status) {
        case 404: e.type = "not_found_error"; e.message = "no route " + req.method + " " + req.path; break;
        case 405: e.message = "method " + req.method + " not allowed on " + req.path; break;
        case 413: e.message = "request body too large (the limit is set by --max-body)"; break;
        default: e.message = "HTTP " + std::to_string(res.status); break;
      }
      res.set_content(error_json(e), "application/json; charset=utf-8");
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& ex) {
        what = ex.what();
      } catch (...) {
      }
      HC_LOG_ERROR("request handler failed: %s", what.c_str());
      send_error(res, {500, "server_error", what});
    });
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      count(req.path, res.status);
      HC_LOG_DEBUG("%s %s -> %d", req.method.c_str(), req.path.c_str(), res.status);
    });
  }
};

HttpServer::HttpServer(std::shared_ptr<const LlamaModel> model,
                       std::shared_ptr<const SparseFfn> sparse, const SchedulerParams& sched,
                       const ServerOptions& opts, std::string model_path)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.model = model;
  m.opts = opts;
  m.info.model = model.get();
  m.info.file_name = std::filesystem::path(model_path).filename().string();
  m.info.id = opts.model_id.empty() ? std::filesystem::path(model_path).stem().string()
                                     : opts.model_id;
  m.info.n_ctx_slot = sched.n_ctx_slot;
  m.info.chat_template = opts.chat_template;
  m.sched = std::make_unique<Scheduler>(std::move(model), std::move(sparse), sched);
  const int threads = opts.http_threads > 0 ? opts.http_threads
                                            : std::min(512, sched.n_parallel + sched.max_queue + 8);
  m.svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  m.svr.set_payload_max_length(opts.max_body_bytes);
  m.svr.set_read_timeout(30, 0);
  m.svr.set_write_timeout(30, 0);
  m.svr.set_keep_alive_timeout(2);
  m.routes();
}

HttpServer::~HttpServer() {
  impl_->svr.stop();
  impl_->sched->stop();
}

Result<int> HttpServer::bind() {
  Impl& m = *impl_;
  int port = m.opts.port;
  if (port == 0) {
    port = m.svr.bind_to_any_port(m.opts.host);
    if (port < 0) return Status::Error("cannot bind " + m.opts.host + " on any port");
  } else if (!m.svr.bind_to_port(m.opts.host, port)) {
    return Status::Error("cannot bind " + m.opts.host + ":" + std::to_string(port) +
                         " (in use, or not an address of this machine)");
  }
  return port;
}

Status HttpServer::serve() {
  if (!impl_->svr.listen_after_bind() && !impl_->shutting_down)
    return Status::Error("the HTTP listener stopped unexpectedly");
  impl_->sched->stop();
  return Status::Ok();
}

void HttpServer::shutdown() {
  Impl& m = *impl_;
  if (m.shutting_down.exchange(true)) return;
  m.sched->drain(m.opts.shutdown_grace);  // in-flight requests finish (or are cancelled)
  m.svr.stop();
}

std::string HttpServer::metrics_text() const { return impl_->metrics(); }

}  // namespace hc
