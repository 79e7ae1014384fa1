// hotcold serve: the OpenAI-compatible HTTP server (app/server.h) with flags as llama.cpp's
// llama-server has them (-m, --host, --port, -np/--parallel, -c is the total context that the
// slots share, -a/--alias). The device flags of run (-ngl, --vram-budget / --stats, --plan,
// --dynamic, --migrate) serve over the hot/cold split: each slot has its own device session
// (engine/scheduler.h).
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <thread>

#include "app/commands.h"
#include "app/common.h"
#include "app/device_setup.h"
#include "app/dynamic_setup.h"
#include "app/server.h"
#include "core/log.h"
#include "engine/chat_template.h"

namespace hc {

namespace {

constexpr char kCmd[] = "serve";

struct ServeFlags {
  ModelFlags model;
  SparseFlags sparse;
  DeviceFlags device;
  DynamicFlags dynamic;
  ServerOptions server;
  int parallel = 1;
  int max_queue = 64;
  int max_body_kib = 1024;
  float grace_s = 10.0f;
  int cache_ram_mib = 8192;  // llama-server's --cache-ram default
  bool no_cache_prompt = false;
};

// SIGINT/SIGTERM are blocked in every thread and taken by sigwait in one watcher thread, which
// asks the server to shut down gracefully. SIGUSR1 only wakes the watcher when the server
// stopped on its own.
class SignalWatcher {
 public:
  explicit SignalWatcher(HttpServer* srv) : srv_(srv) {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    thread_ = std::thread([this] {
      int sig = 0;
      if (sigwait(&set_, &sig) != 0 || sig == SIGUSR1) return;
      HC_LOG_INFO("%s: finishing in-flight requests, then exiting", sig == SIGINT ? "SIGINT" : "SIGTERM");
      srv_->shutdown();
    });
  }
  ~SignalWatcher() {
    pthread_kill(thread_.native_handle(), SIGUSR1);
    thread_.join();
  }

 private:
  HttpServer* srv_;
  sigset_t set_;
  std::thread thread_;
};

Status serve(ServeFlags& f) {
  // Signals first: every thread started from here on inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server

  HC_TRY(load_http_module());  // before the model: a missing module fails in milliseconds
  ModelFlags mf = f.model;
  f.sparse.apply_to(&mf);
  HC_ASSIGN_OR_RETURN(auto model, load_model_logged(mf));
  HC_ASSIGN_OR_RETURN(auto sparse, sparse_from_flags(f.sparse, *model));
  if (f.server.chat_template.empty()) {
    auto t = model->gguf().get_string("tokenizer.chat_template");
    f.server.chat_template = t.ok() ? *t : "chatml";
    if (!t.ok()) HC_LOG_WARN("model has no chat template; /v1/chat/completions uses chatml");
  }
  HC_ASSIGN_OR_RETURN(std::string family, detect_chat_template(f.server.chat_template));

  // -c is the total context; each slot gets an equal share (llama-server's n_ctx / n_parallel).
  const int n_ctx = f.model.ctx > 0 ? f.model.ctx : std::min(model->hparams().n_ctx_train, 4096);
  SchedulerParams sp;
  sp.n_parallel = f.parallel;
  sp.n_ctx_slot = n_ctx / f.parallel;
  sp.n_threads = f.model.threads;
  sp.n_batch = f.model.batch;
  sp.max_queue = f.max_queue;
  sp.cache_prompt = !f.no_cache_prompt;
  sp.cache_ram_bytes =
      f.cache_ram_mib < 0 ? UINT64_MAX : static_cast<uint64_t>(f.cache_ram_mib) << 20;
  if (sp.n_ctx_slot < 8)
    return Status::Error("-c " + std::to_string(n_ctx) + " over --parallel " +
                         std::to_string(f.parallel) + " leaves " + std::to_string(sp.n_ctx_slot) +
                         " tokens per slot: expected at least 8");
  f.server.max_body_bytes = static_cast<size_t>(f.max_body_kib) * 1024;
  f.server.shutdown_grace = std::chrono::milliseconds(static_cast<int64_t>(f.grace_s * 1000));

  // Hybrid serving: the placement for every slot's KV (n_parallel x n_ctx_slot) and buffers.
  SchedulerDevice dev;
  HC_ASSIGN_OR_RETURN(dev.model,
                      device_from_flags(f.device, f.sparse, f.model.model, *model, sparse.get(),
                                        sp.n_ctx_slot * sp.n_parallel, sp.n_parallel));
  HC_ASSIGN_OR_RETURN(dev.dynamic, make_dynamic(*model, f.dynamic, sparse.get(), dev.model.get(),
                                                f.sparse.stats));
  std::unique_ptr<Scheduler> sched;
  if (dev.model || dev.dynamic) {
    HC_ASSIGN_OR_RETURN(sched, Scheduler::create(model, sparse, sp, std::move(dev)));
    const SchedulerStats st = sched->stats();
    if (st.device_kv_bytes > 0)
      HC_LOG_INFO("device: KV cache %.1f MiB on the device (%d slots)",
                  st.device_kv_bytes / 1048576.0, sp.n_parallel);
  } else {
    sched = std::make_unique<Scheduler>(model, sparse, sp);
  }

  HttpServerConfig cfg;
  cfg.model = model;
  cfg.sched = std::move(sched);
  cfg.opts = f.server;
  cfg.model_path = f.model.model;
  HC_ASSIGN_OR_RETURN(std::unique_ptr<HttpServer> srv, open_http_server(std::move(cfg)));
  HC_ASSIGN_OR_RETURN(int port, srv->bind());
  HC_LOG_INFO("chat template: %s; %d slot(s) x %d tokens of context, queue of %d, %d thread(s)",
              family.c_str(), sp.n_parallel, sp.n_ctx_slot, sp.max_queue, sp.n_threads);
  // Scripts (and the tests) wait for this line.
  std::fprintf(stderr, "hotcold serve: listening on http://%s:%d\n", f.server.host.c_str(), port);
  std::fflush(stderr);
  Status st;
  {
    SignalWatcher watcher(srv.get());
    st = srv->serve();
  }
  if (st.ok()) HC_LOG_INFO("server stopped");
  return st;
}

}  // namespace

int cmd_serve(const Args& args) {
  ServeFlags f;
  ArgParser p(kCmd, "OpenAI-compatible HTTP server (completions, chat, streaming, web chat at /)");
  // Throughput first: decode slots share each unpacked weight block (docs/SERVER.md).
  f.model.decode_kernels = "fast";
  add_model_flags(p, &f.model);
  add_sparse_flags(p, &f.sparse);
  add_device_flags(p, &f.device);
  add_dynamic_flags(p, &f.dynamic);
  p.add_string("--host", &f.server.host, "address to listen on");
  p.add_int("--port", &f.server.port, "port to listen on; 0: any free port");
  p.add_int("-np,--parallel", &f.parallel,
            "sessions decoded together, each with its own KV cache; -c is split between them");
  p.add_int("--max-queue", &f.max_queue,
            "requests that may wait for a free slot; more get HTTP 503");
  p.add_int("--max-body", &f.max_body_kib, "largest request body in KiB; larger get 413");
  p.add_int("--http-threads", &f.server.http_threads,
            "HTTP worker threads (default: parallel + max-queue + 8)");
  p.add_string("-a,--alias", &f.server.model_id,
               "model name in /v1/models and responses (default: the file name without .gguf)");
  p.add_string("--chat-template", &f.server.chat_template,
               "template name or text (default: the model's)");
  p.add_int("-cram,--cache-ram", &f.cache_ram_mib,
            "MiB of host memory for earlier prompts' KV beyond the slots' own (llama-server's "
            "prompt cache; -1: no limit, 0: only the slots')");
  p.add_flag("--no-cache-prompt", &f.no_cache_prompt,
             "never reuse an earlier prompt's KV (every prompt evaluated whole)");
  p.add_float("--shutdown-grace", &f.grace_s,
              "seconds in-flight requests may run after SIGINT/SIGTERM before they are cancelled");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  if (f.parallel < 1 || f.parallel > 256)
    return usage_error(kCmd, "--parallel: expected 1..256 slots, found " + std::to_string(f.parallel));
  if (f.max_queue < 0)
    return usage_error(kCmd, "--max-queue: expected a non-negative count, found " + std::to_string(f.max_queue));
  if (f.max_body_kib < 1)
    return usage_error(kCmd, "--max-body: expected a positive size in KiB, found " + std::to_string(f.max_body_kib));
  if (f.server.port < 0 || f.server.port > 65535)
    return usage_error(kCmd, "--port: expected 0..65535, found " + std::to_string(f.server.port));
  if (f.server.http_threads < 0 || f.server.http_threads > 4096)
    return usage_error(kCmd, "--http-threads: expected 0..4096, found " + std::to_string(f.server.http_threads));
  if (f.cache_ram_mib < -1)
    return usage_error(kCmd, "--cache-ram: expected MiB >= 0 or -1 (no limit), found " +
                                 std::to_string(f.cache_ram_mib));
  if (!(f.grace_s >= 0))
    return usage_error(kCmd, "--shutdown-grace: expected seconds >= 0");
  return exit_code_for(kCmd, serve(f));
}

}  // namespace hc
