// `hotcold serve`: an OpenAI-compatible HTTP API (cpp-httplib, nlohmann-json) over the
// continuous-batching Scheduler (engine/scheduler.h).
//
//   POST /v1/completions, /v1/chat/completions  (streaming: server-sent events, data: [DONE])
//   POST /tokenize, /detokenize  (llama.cpp server's)
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

// POST /tokenize, as llama.cpp's server: {"content": string, "add_special": bool (false),
// "parse_special": bool (true), "with_pieces": bool (false)} -> {"tokens": [id, ...]}, or with
// pieces {"tokens": [{"id": id, "piece": string, or its bytes as numbers when not valid
// UTF-8}]}. No content: no tokens. The response body, or a 400.
std::variant<std::string, ApiError> tokenize_response(std::string_view body,
                                                      const ApiModelInfo& info);
// POST /detokenize: {"tokens": [id, ...]} -> {"content": the pieces concatenated, special
// tokens as their text (llama.cpp's tokens_to_str)}; an id outside the vocabulary is a 400.
std::variant<std::string, ApiError> detokenize_response(std::string_view body,
                                                        const ApiModelInfo& info);

// What the HTTP server is started with (hotcold serve builds it).
struct HttpServerConfig {
  std::shared_ptr<const LlamaModel> model;
  std::unique_ptr<Scheduler> sched;  // over `model` (hotcold serve builds it: host or hybrid)
  ServerOptions opts;
  std::string model_path;  // names the model in /v1/models
};

// The HTTP front end. Its implementation (app/http/http_server.cpp) is a module,
// libhotcold_http.so beside the hotcold binary, that only hotcold serve opens: the cpp-httplib
// library it links initialises OpenSSL as it loads, ~4.6 MiB of RSS that every other command
// (run, bench, perplexity...) would otherwise carry.
class HttpServer {
 public:
  virtual ~HttpServer() = default;
  // Binds the listening socket; returns the port (useful with port 0).
  virtual Result<int> bind() = 0;
  // Serves until shutdown() and returns once every handler has finished.
  virtual Status serve() = 0;
  // From any thread: refuse new work (503), let in-flight requests finish within the grace
  // period (then cancel them), and stop the listener.
  virtual void shutdown() = 0;
  virtual std::string metrics_text() const = 0;
};

// Opens the HTTP module (once per process; later calls return at once); an error names the
// module's path and why it did not open. hotcold serve calls it before loading the model.
Status load_http_module();
// Creates a server from the module (loading it first if need be).
Result<std::unique_ptr<HttpServer>> open_http_server(HttpServerConfig cfg);

// The module's entry point, looked up by name:
//   HttpServer* hc_http_server_create(int abi, size_t config_bytes, HttpServerConfig* cfg,
//                                     std::string* error);
// abi and config_bytes guard against a module built from other sources than the binary.
inline constexpr int kHttpModuleAbi = 4;
inline constexpr char kHttpModuleFile[] = "libhotcold_http.so";
inline constexpr char kHttpModuleEntry[] = "hc_http_server_create";
using HttpServerFactory = HttpServer* (*)(int abi, size_t config_bytes, HttpServerConfig* cfg,
                                          std::string* error);

}  // namespace hc
