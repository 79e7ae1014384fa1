// `hotcold serve`: an OpenAI-compatible HTTP API (cpp-httplib, nlohmann-json) over the
// continuous-batching Scheduler (engine/scheduler.h).
//
//   POST /v1/completions, /v1/chat/completions  (streaming: server-sent events, data: [DONE])
//   GET  /v1/models, /health, /metrics (Prometheus text), /  (the web chat page)
//
// Request parsing is a pure function (parse_completion_request) so its validation is
// unit-tested without sockets. Every error is a JSON body {"error": {"code", "message",
// "type"}} with a 4xx/5xx status, as llama.cpp's server sends.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"
#include "engine/scheduler.h"
#include "model/llama_model.h"
#include "model/sparse_ffn.h"

namespace hc {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0: any free port
  size_t max_body_bytes = 1 << 20;   // larger request bodies get 413
  int http_threads = 0;              // 0: slots + queue + 8
  std::string model_id;              // /v1/models id; empty: the file name without .gguf
  std::string chat_template;         // empty: the model's (tokenizer.chat_template), else chatml
  std::chrono::milliseconds shutdown_grace{10000};  // in-flight requests may finish this long
};

struct ApiError {
  int status = 400;
  std::string type;  // invalid_request_error, not_found_error, unavailable_error, server_error
  std::string message;
};

// What a validated /v1/completions or /v1/chat/completions body asks for.
struct CompletionRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage
  std::vector<int32_t> prompt;     // tokens, BOS included as hotcold run adds it
  GenerationParams gen;
};

// What request validation needs to know about the served model.
struct ApiModelInfo {
  const LlamaModel* model = nullptr;
  std::string id;              // the model name clients must use (or omit)
  std::string file_name;       // also accepted as a model name
  std::string chat_template;   // resolved family name or template text
  int n_ctx_slot = 0;
};

std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body,
                                                                   bool chat,
                                                                   const ApiModelInfo& info);

// {"error": {"code": status, "message": ..., "type": ...}}
std::string error_json(const ApiError& e);

class HttpServer {
 public:
  HttpServer(std::shared_ptr<const LlamaModel> model, std::shared_ptr<const SparseFfn> sparse,
             const SchedulerParams& sched, const ServerOptions& opts, std::string model_path);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port (useful with port 0).
  Result<int> bind();
  // Serves until shutdown() and returns once every handler has finished.
  Status serve();
  // From any thread: refuse new work (503), let in-flight requests finish within the grace
  // period (then cancel them), and stop the listener.
  void shutdown();
  std::string metrics_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hc
