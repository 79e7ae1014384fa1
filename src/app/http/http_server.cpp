// The HTTP half of `hotcold serve` (app/server.h): routes, streaming and metrics over
// cpp-httplib. Built as a module, libhotcold_http.so, that only hotcold serve opens: the
// library Debian's cpp-httplib is linked with initialises OpenSSL when it loads, which costs
// every process ~4.6 MiB of RSS (libcrypto's pages, its config and error tables). The rest of
// the server (request validation, the scheduler) is in the hotcold binary; this module calls it
// through the binary's exported symbols.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/server.h"
#include "app/web_chat.h"
#include "core/log.h"

namespace hc {

using json = nlohmann::json;

namespace {

struct Server final : HttpServer {
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
                                    "/tokenize", "/detokenize",
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

  json usage_json(const GenRequest::State& u) const {
    return {{"prompt_tokens", u.n_prompt},
            {"completion_tokens", u.n_generated},
            {"total_tokens", u.n_prompt + u.n_generated}};
  }

  // OpenAI's logprobs object for these tokens (their pieces as text; with their bytes for
  // chat, whose pieces may be part of a character). Completions' text_offset: each token's
  // byte offset in the completion's text, counted on from *text_offset.
  json logprobs_json(const CompletionRequest& r, const std::vector<TokenLogprob>& probs,
                     int64_t* text_offset) const {
    const Tokenizer& tok = info.model->tokenizer();
    auto bytes = [](const std::string& piece) {
      json b = json::array();
      for (unsigned char ch : piece) b.push_back(static_cast<int>(ch));
      return b;
    };
    if (r.chat) {
      json content = json::array();
      for (const TokenLogprob& p : probs) {
        const std::string piece = tok.token_to_piece(p.id, false);
        json top = json::array();
        for (const auto& [id, lp] : p.top) {
          const std::string t = tok.token_to_piece(id, false);
          top.push_back({{"token", t}, {"logprob", lp}, {"bytes", bytes(t)}});
        }
        content.push_back(
            {{"token", piece}, {"logprob", p.logprob}, {"bytes", bytes(piece)}, {"top_logprobs", top}});
      }
      return {{"content", content}};
    }
    json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
    for (const TokenLogprob& p : probs) {
      const std::string piece = tok.token_to_piece(p.id, false);
      tokens.push_back(piece);
      lps.push_back(p.logprob);
      json top = json::object();
      for (const auto& [id, lp] : p.top) {
        const std::string t = tok.token_to_piece(id, false);
        if (!top.contains(t)) top[t] = lp;  // two ids with one piece: the likelier one
      }
      tops.push_back(top);
      offs.push_back(*text_offset);
      *text_offset += static_cast<int64_t>(piece.size());
    }
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops},
            {"text_offset", offs}};
  }

  // One streamed chunk (or the whole non-streamed body). probs: the tokens' log probabilities
  // when the request asked for them.
  json choice_json(const CompletionRequest& r, const std::string& text, bool stream,
                   const char* finish, bool first, const std::vector<TokenLogprob>* probs = nullptr,
                   int64_t* text_offset = nullptr) const {
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
    }
    c["logprobs"] = r.gen.logprobs >= 0 && probs ? logprobs_json(r, *probs, text_offset)
                                                 : json(nullptr);
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
  static ApiError early_end_error(const GenRequest::State& u) {
    if (u.reason == FinishReason::kError) return {500, "server_error", u.error};
    return {503, "unavailable_error", u.error.empty() ? "the request was cancelled" : u.error};
  }
  static bool ended_early(const GenRequest::State& u) {
    return u.reason == FinishReason::kError || u.reason == FinishReason::kCancelled;
  }

  static const char* finish_name(FinishReason r) {
    return r == FinishReason::kLength ? "length" : "stop";
  }

  // Responses still being written. shutdown() waits for them (bounded) before it stops the
  // listener: httplib ends a chunked body at once when the listener stops, and a stream cut
  // there would lose its last text, its finish or error event and [DONE].
  std::mutex open_mu;
  std::condition_variable open_cv;
  int open_responses = 0;
  struct OpenResponse {
    Server* s;
    explicit OpenResponse(Server* srv) : s(srv) {
      std::lock_guard<std::mutex> lk(s->open_mu);
      ++s->open_responses;
    }
    ~OpenResponse() {
      {
        std::lock_guard<std::mutex> lk(s->open_mu);
        --s->open_responses;
      }
      s->open_cv.notify_all();
    }
    OpenResponse(const OpenResponse&) = delete;
    OpenResponse& operator=(const OpenResponse&) = delete;
  };
  // False if some response was still open after `limit` (a client that stopped reading).
  bool wait_responses(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lk(open_mu);
    return open_cv.wait_for(lk, limit, [&] { return open_responses == 0; });
  }

  void handle_completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    // Counted open before shutting_down is read: shutdown() sets that flag, then waits for the
    // open responses, so it either turns this request away here or waits for its response.
    auto open = std::make_shared<OpenResponse>(this);
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
    // Only its state is read here: the output is read in one place, the response's body below,
    // with its own cursor (a request may well be done already, all its text unread).
    while (!gen->wait_started(std::chrono::milliseconds(200))) {
    }
    if (const GenRequest::State st = gen->state(); ended_early(st))
      return send_error(res, early_end_error(st));
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    if (r->stream) {
      auto first = std::make_shared<bool>(true);
      auto offset = std::make_shared<int64_t>(0);
      auto cursor = std::make_shared<GenRequest::Cursor>();
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [this, r, gen, id, first, offset, cursor](size_t, httplib::DataSink& sink) {
            GenRequest::Update u = gen->read(*cursor, std::chrono::milliseconds(100));
            auto send = [&](const json& j) {
              const std::string line = "data: " + dump(j) + "\n\n";
              return sink.write(line.data(), line.size());
            };
            if (!u.text.empty() || !u.logprobs.empty() || (*first && r->chat)) {
              json j = envelope(*r, id, true);
              j["choices"] = json::array(
                  {choice_json(*r, u.text, true, nullptr, *first, &u.logprobs, offset.get())});
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
          // No-op when finished; stops it on an early close. `open` ends with the response.
          [gen, open](bool) { gen->cancel(); });
      return;
    }
    // Non-streaming: the body is one JSON value. While generating, a space every second (JSON
    // allows leading whitespace) shows whether the client is still there: a failed write
    // cancels the request. The body is the whole output, read from the start once the request
    // is done (nothing is read, or copied, while it generates).
    res.set_chunked_content_provider(
        "application/json; charset=utf-8",
        [this, r, gen, id](size_t, httplib::DataSink& sink) {
          const GenRequest::State u = gen->wait_done(std::chrono::seconds(1));
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
            GenRequest::Cursor from_start;
            const GenRequest::Update all = gen->read(from_start, std::chrono::milliseconds(0));
            json j = envelope(*r, id, false);
            int64_t offset = 0;
            j["choices"] = json::array({choice_json(*r, all.text, false, finish_name(all.reason),
                                                    false, &all.logprobs, &offset)});
            j["usage"] = usage_json(all);
            body = dump(j);
          }
          sink.write(body.data(), body.size());
          sink.done();
          return true;
        },
        [gen, open](bool) { gen->cancel(); });
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
    metric("hotcold_prompt_mixed_passes_total", "counter",
           "Prompt micro-batches evaluated inside a decode pass (one weight read for both).",
           double(s.mixed_passes));
    metric("hotcold_prompt_tokens_reused_total", "counter",
           "Prompt tokens not evaluated: their KV was reused from an earlier prompt.",
           double(s.prompt_tokens_reused));
    metric("hotcold_prompt_cache_hits_total", "counter",
           "Requests that reused an earlier prompt's KV.", double(s.prompt_cache_hits));
    metric("hotcold_prompt_cache_bytes", "gauge",
           "Host bytes of earlier prompts' KV kept beyond the slots (--cache-ram).",
           double(s.prompt_cache_bytes));
    metric("hotcold_prompt_cache_entries", "gauge", "Prefixes kept beyond the slots.",
           double(s.prompt_cache_entries));
    metric("hotcold_prompt_cache_evictions_total", "counter",
           "Prefixes dropped to keep the store within --cache-ram.",
           double(s.prompt_cache_evictions));
    metric("hotcold_generated_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
    metric("hotcold_tokens_per_second", "gauge",
           "Generated tokens per second over the last 10 s, all sessions together.",
           s.recent_tokens_per_second);
    metric("hotcold_decode_tokens_per_second", "gauge",
           "Generated tokens per second of decode time since start.",
           s.decode_seconds > 0 ? double(s.decode_batch_tokens) / s.decode_seconds : 0.0);
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
    const double ffn_all = double(s.sparse.computed) + double(s.sparse.device_computed);
    metric("hotcold_fast_device_neuron_share", "gauge",
           "Share of the sparse FFN's neuron computations (neurons x tokens) done on the fast "
           "device (0: CPU only, no second device).",
           ffn_all > 0 ? double(s.sparse.device_computed) / ffn_all : 0.0);
    metric("hotcold_kv_cache_bytes", "gauge", "KV cache bytes of all slots.", double(s.kv_bytes));
    metric("hotcold_device_kv_cache_bytes", "gauge",
           "KV cache bytes of all slots on the second device (hybrid serving).",
           double(s.device_kv_bytes));
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
    // llama.cpp server's tokenizer endpoints (no slot, no model run).
    auto reply = [](httplib::Response& res, std::variant<std::string, ApiError> r) {
      if (auto* e = std::get_if<ApiError>(&r)) return send_error(res, *e);
      res.set_content(std::get<std::string>(r), "application/json; charset=utf-8");
    };
    svr.Post("/tokenize", [this, reply](const httplib::Request& q, httplib::Response& s) {
      reply(s, tokenize_response(q.body, info));
    });
    svr.Post("/detokenize", [this, reply](const httplib::Request& q, httplib::Response& s) {
      reply(s, detokenize_response(q.body, info));
    });

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

  explicit Server(HttpServerConfig cfg) {
    model = cfg.model;
    opts = cfg.opts;
    info.model = model.get();
    info.file_name = std::filesystem::path(cfg.model_path).filename().string();
    info.id = opts.model_id.empty() ? std::filesystem::path(cfg.model_path).stem().string()
                                    : opts.model_id;
    sched = std::move(cfg.sched);
    info.n_ctx_slot = sched->params().n_ctx_slot;
    info.chat_template = opts.chat_template;
    const int threads = opts.http_threads > 0
                            ? opts.http_threads
                            : std::min(512, sched->params().n_parallel + sched->params().max_queue + 8);
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    svr.set_payload_max_length(opts.max_body_bytes);
    svr.set_read_timeout(30, 0);
    svr.set_write_timeout(30, 0);
    svr.set_keep_alive_timeout(2);
    // The listening socket's options: SO_REUSEADDR only, so a restart right after a stop binds
    // (connections of the old process in TIME_WAIT), while a port another server listens on
    // refuses the bind. httplib's default sets SO_REUSEPORT instead, with which a second server
    // on a busy port started "successfully" and the kernel split connections between the two.
    // Kept: the socket, so bind() can widen its backlog (see there).
    svr.set_socket_options([this](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      listen_fd = sock;
    });
    routes();
  }

  ~Server() override {
    svr.stop();
    sched->stop();
  }

  socket_t listen_fd = -1;

  Result<int> bind() override {
    int port = opts.port;
    errno = 0;
    if (port == 0) {
      port = svr.bind_to_any_port(opts.host);
      if (port < 0) return Status::Error("cannot listen on " + opts.host + " on any port: " + bind_error(errno));
    } else if (!svr.bind_to_port(opts.host, port)) {
      return Status::Error("cannot listen on " + opts.host + ":" + std::to_string(port) + ": " +
                           bind_error(errno));
    }
    // Debian's compiled cpp-httplib listens with a backlog of 5: 32 clients connecting at once
    // while the accept thread waits for a core overflowed it, and some connections were reset
    // (server.test_load under ctest -j2). Listening again on a listening socket only changes
    // its backlog (Linux).
    if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
    return port;
  }

  Status serve() override {
    if (!svr.listen_after_bind() && !shutting_down)
      return Status::Error("the HTTP listener stopped unexpectedly");
    sched->stop();
    return Status::Ok();
  }

  // Why binding failed, from the errno of httplib's last bind() (it closes the socket after).
  static std::string bind_error(int err) {
    if (err == EADDRINUSE) return "the address is already in use (another server listens there)";
    if (err == EADDRNOTAVAIL) return "not an address of this machine";
    if (err == EACCES) return "permission denied (a port below 1024 needs privileges)";
    if (err != 0) return std::strerror(err);
    return "not an address of this machine, or in use";
  }

  void shutdown() override {
    if (shutting_down.exchange(true)) return;
    sched->drain(opts.shutdown_grace);  // in-flight requests finish (or are cancelled)
    // Every finished request's response writes its end (text, finish or error event, [DONE])
    // before the listener stops; a client that stopped reading holds it up 5 s at most.
    if (!wait_responses(std::chrono::seconds(5)))
      HC_LOG_WARN("shutdown: a response still open after 5 s (a client not reading) is cut short");
    svr.stop();
  }

  std::string metrics_text() const override { return metrics(); }
};

}  // namespace

}  // namespace hc

// The module's entry point: open_http_server looks it up by this name (kHttpModuleEntry).
extern "C" __attribute__((visibility("default"))) hc::HttpServer* hc_http_server_create(
    int abi, size_t config_bytes, hc::HttpServerConfig* cfg, std::string* error) {
  if (abi != hc::kHttpModuleAbi || config_bytes != sizeof(hc::HttpServerConfig)) {
    *error = "the HTTP module was built from other sources than this hotcold binary (interface " +
             std::to_string(abi) + "/" + std::to_string(config_bytes) + " bytes, module has " +
             std::to_string(hc::kHttpModuleAbi) + "/" + std::to_string(sizeof(hc::HttpServerConfig)) +
             "): rebuild both";
    return nullptr;
  }
  try {
    return new hc::Server(std::move(*cfg));
  } catch (const std::exception& e) {
    *error = std::string("cannot start the HTTP server: ") + e.what();
    return nullptr;
  }
}
