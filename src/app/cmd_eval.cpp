// hotcold eval: accuracy, speed and memory of one configuration (dense, static sparse, dynamic
// sparse, any sparsity, device budget) on
//   wikitext2, tinystories   perplexity (llama.cpp's method) of ../shared/data's texts
//   code-ppl                 perplexity of HumanEval's reference solutions given their prompts
//   humaneval, mbpp          pass@1: greedy completions run against the problems' tests in the
//                            sandbox (eval/sandbox.h)
// Results go under OUT/LABEL/: one JSON line per finished problem (TASK.jsonl: a rerun resumes
// where the last stopped), perplexities (TASK.json), summary.json and trace.csv (the
// dynamic-sparsity time series). After every run, OUT/results.json, OUT/results.md and the PNG
// plots are rebuilt from every LABEL/summary.json under OUT (`--report` does only that). A rerun
// with every task resumed keeps the earlier summary's speed, sparsity, device and dynamic figures
// (and its trace); one that computes something reports that work's.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/common.h"
#include "app/device_setup.h"
#include "app/dynamic_setup.h"
#include "app/eval_data.h"
#include "app/plot.h"
#include "app/png.h"
#include "core/log.h"
#include "engine/chat_template.h"
#include "eval/binomial_interval.h"
#include "eval/code_tasks.h"
#include "eval/sandbox.h"
#include "sparse/placement_plan.h"

namespace hc {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr char kCmd[] = "eval";
const char* const kTasks[] = {"wikitext2", "tinystories", "code-ppl", "humaneval", "mbpp"};

struct EvalFlags {
  ModelFlags model;
  SparseFlags sparse;
  DeviceFlags device;
  DynamicFlags dynamic;
  std::string tasks = "wikitext2,tinystories,code-ppl,humaneval,mbpp";
  std::string data;  // empty: found by find_eval_data (app/eval_data.h)
  std::string out = "eval-out";
  std::string label;
  int limit = -1;        // problems per code task (-1: all)
  int n_predict = 256;   // tokens per completion
  int ppl_chunks = 8;
  int ppl_ctx = 512;
  float timeout = 10;    // seconds per test program
  bool chat = false;     // code prompts as a chat turn (instruct models)
  std::string chat_template;
  bool report_only = false;
};

Result<std::vector<std::string>> parse_tasks(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string t;
  while (std::getline(ss, t, ',')) {
    if (t.empty()) continue;
    if (std::find_if(std::begin(kTasks), std::end(kTasks), [&](const char* k) { return t == k; }) ==
        std::end(kTasks))
      return Status::Error("--tasks: unknown task '" + t +
                           "' (expected wikitext2, tinystories, code-ppl, humaneval, mbpp)");
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  if (out.empty()) return Status::Error("--tasks: expected at least one task");
  return out;
}

// A label that names the configuration when none is given: dense, s0.80, s0.80-dyn, ...
std::string default_label(const EvalFlags& f) {
  char buf[64];
  std::string l;
  if (f.sparse.predictor) l = "pred";
  else if (f.sparse.sparsity >= 0) {
    std::snprintf(buf, sizeof buf, "s%.2f", static_cast<double>(f.sparse.sparsity));
    l = buf;
  } else if (f.sparse.sparse) l = "relu";
  else l = "dense";
  if (f.device.vram_budget_gib >= 0) {
    std::snprintf(buf, sizeof buf, "-b%g", static_cast<double>(f.device.vram_budget_gib));
    l += buf;
  }
  if (f.device.n_gpu_layers != 0) l += "-ngl" + std::to_string(f.device.n_gpu_layers);
  if (!f.device.plan.empty()) l += "-plan";
  if (f.dynamic.dynamic) l += "-dyn";
  if (f.dynamic.migrate) l += "-mig";
  return l;
}

json config_json(const EvalFlags& f) {
  // The device budget: the flag's, else the one the plan was made for.
  json budget = f.device.vram_budget_gib >= 0 ? json(f.device.vram_budget_gib) : json(nullptr);
  if (budget.is_null() && !f.device.plan.empty())
    if (auto plan = sparse::read_plan(f.device.plan); plan.ok() && plan->budget_bytes > 0)
      budget = static_cast<double>(plan->budget_bytes) / (1024.0 * 1024.0 * 1024.0);
  return json{{"model", fs::path(f.model.model).filename().string()},
              {"threads", f.model.threads},
              {"sparsity", f.sparse.sparsity >= 0 ? json(f.sparse.sparsity) : json(nullptr)},
              {"relu_exact", f.sparse.sparse},
              {"predictor", f.sparse.predictor},
              {"stats", fs::path(f.sparse.stats).filename().string()},
              {"vram_budget_gib", budget},
              {"n_gpu_layers", f.device.n_gpu_layers},
              {"device", f.device.enabled() ? f.device.device : "none"},
              {"device_emulate_gbps", f.device.device_emulate_gbps},
              {"plan", fs::path(f.device.plan).filename().string()},
              {"dynamic", f.dynamic.dynamic},
              {"dyn_target", f.dynamic.dynamic ? f.dynamic.target : ""},
              {"migrate", f.dynamic.migrate},
              {"n_predict", f.n_predict},
              {"chat", f.chat}};
}

// Generated text may hold broken UTF-8 (a token can end inside a character): replaced, not thrown.
std::string dump(const json& j, int indent) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

Status write_text(const std::string& path, const std::string& text) {
  return write_then_rename(path, [&](const std::string& tmp) {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    o << text;
    o.close();
    return o ? Status::Ok() : Status::Error("cannot write '" + tmp + "'");
  });
}

Result<json> read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::Error("cannot open '" + path + "'");
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    return Status::Error("'" + path + "': not valid JSON: " + e.what());
  }
}

// ---- one configuration's run ------------------------------------------------------------

struct Runner {
  Runner(const EvalFlags& flags, std::shared_ptr<const LlamaModel> m)
      : f(flags), model(std::move(m)) {}
  const EvalFlags& f;
  std::shared_ptr<const LlamaModel> model;
  std::unique_ptr<Session> session;
  std::shared_ptr<DynamicSparsity> dyn;
  std::string dir;  // OUT/LABEL
  int n_ctx = 0;
  // Generation and prompt speed over the code tasks' problems (resumed ones included).
  double gen_tokens = 0, gen_seconds = 0, prompt_tokens = 0, prompt_seconds = 0;
  // Perplexities and problems this process computed (not resumed from an earlier run's files).
  int64_t fresh = 0;

  // Perplexity of a text file (first ppl_chunks chunks of ppl_ctx).
  Result<json> perplexity(const std::string& task, const std::string& path) {
    HC_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
    const Tokenizer& tok = model->tokenizer();
    const std::vector<int32_t> tokens = tok.encode(text, true, false);
    const int n_chunk = std::min<int>(f.ppl_chunks, static_cast<int>(tokens.size() / f.ppl_ctx));
    if (n_chunk < 1)
      return Status::Error(task + ": '" + path + "' has " + std::to_string(tokens.size()) +
                           " tokens, fewer than one chunk of " + std::to_string(f.ppl_ctx));
    ProgressBar bar(task, n_chunk, "chunks");
    bar.update(0, 0);
    HC_ASSIGN_OR_RETURN(PplResult r,
                        score_perplexity(*session, tokens, f.ppl_ctx, n_chunk,
                                         [&](int c, const PplResult& run) {
                                           char ex[32];
                                           std::snprintf(ex, sizeof ex, "PPL %.4f", run.ppl);
                                           bar.update(c + 1, double(c + 1) * f.ppl_ctx, ex);
                                         }));
    return json{{"ppl", r.ppl}, {"err", r.err}, {"tokens", r.count}, {"chunks", r.chunks},
                {"ctx", f.ppl_ctx}, {"seconds", r.seconds}};
  }

  // Perplexity of HumanEval's reference solutions given the prompts: the tokens of prompt +
  // solution are evaluated, the solution's are scored.
  Result<json> code_ppl(const std::vector<eval::CodeProblem>& probs) {
    const Tokenizer& tok = model->tokenizer();
    const int n_vocab = model->hparams().n_vocab;
    double nll = 0;
    int64_t count = 0;
    const int64_t n = f.limit >= 0 ? std::min<int64_t>(f.limit, probs.size()) : probs.size();
    ProgressBar bar("code-ppl", n, "problems");
    bar.update(0, 0);
    double toks = 0;
    const double t0 = now_seconds();
    for (int64_t i = 0; i < n; ++i) {
      const eval::CodeProblem& p = probs[static_cast<size_t>(i)];
      const std::vector<int32_t> head = tok.encode(p.prompt, true, false);
      const std::vector<int32_t> all = tok.encode(p.prompt + p.reference, true, false);
      if (all.size() > static_cast<size_t>(n_ctx) || all.size() <= head.size()) continue;
      session->truncate(0);
      HC_TRY(session->eval(all, /*all_logits=*/true));
      const std::vector<float>& lg = session->logits();
      for (size_t j = head.size(); j < all.size(); ++j) {
        nll += nll_of(lg.data() + int64_t(j - 1) * n_vocab, n_vocab, all[j]);
        ++count;
      }
      toks += static_cast<double>(all.size());
      char ex[32];
      std::snprintf(ex, sizeof ex, "PPL %.4f", count ? std::exp(nll / count) : 0.0);
      bar.update(i + 1, toks, ex);
    }
    if (count == 0) return Status::Error("code-ppl: no problem fits the context");
    return json{{"ppl", std::exp(nll / static_cast<double>(count))},
                {"tokens", count},
                {"problems", n},
                {"seconds", now_seconds() - t0}};
  }

  std::string chat_template;  // resolved family when --chat

  // The text the model continues: the prompt itself, or (--chat) a user turn asking for the
  // code and the assistant's answer already opened with a code block (and, for HumanEval, the
  // function's signature and docstring), so the completion is the code that follows the prompt
  // either way and builds the same program.
  Result<std::string> model_prompt(const eval::CodeProblem& p) {
    if (!f.chat) return p.prompt;
    const bool mbpp = p.task_id.rfind("MBPP/", 0) == 0;
    const ChatMessage user{
        "user", mbpp ? "Write a Python function for this task.\n" + p.prompt
                     : "Complete the following Python function.\n```python\n" + p.prompt + "```"};
    HC_ASSIGN_OR_RETURN(std::string text,
                        apply_chat_template(chat_template, std::span(&user, 1), true));
    return text + "```python\n" + (mbpp ? std::string() : p.prompt);
  }

  // Greedy completion of a prompt, cut at the problem's stop sequences or EOG.
  Result<std::string> complete(const eval::CodeProblem& p, int* n_gen) {
    const Tokenizer& tok = model->tokenizer();
    HC_ASSIGN_OR_RETURN(const std::string text_in, model_prompt(p));
    std::vector<int32_t> toks = tok.encode(text_in, true, /*parse_special=*/f.chat);
    *n_gen = 0;
    if (static_cast<int>(toks.size()) + 1 >= n_ctx) return std::string();
    session->truncate(0);
    double t0 = now_seconds();
    HC_TRY(session->eval(toks));
    prompt_seconds += now_seconds() - t0;
    prompt_tokens += static_cast<double>(toks.size());
    std::string text;
    t0 = now_seconds();
    const int n_vocab = model->hparams().n_vocab;
    while (*n_gen < f.n_predict && session->n_past() < n_ctx) {
      const std::vector<float>& lg = session->logits();
      const int32_t next =
          static_cast<int32_t>(std::max_element(lg.begin(), lg.begin() + n_vocab) - lg.begin());
      if (tok.is_eog(next)) break;
      text += tok.token_to_piece(next, false);
      ++*n_gen;
      if (eval::stop_position(p, text) < text.size()) break;  // a stop sequence
      const int32_t one[1] = {next};
      HC_TRY(session->eval(one));
    }
    gen_seconds += now_seconds() - t0;
    gen_tokens += *n_gen;
    return eval::truncate_completion(p, text);
  }

  // pass@1 over the problems, resuming from TASK.jsonl.
  Result<json> code_task(const std::string& task, const std::vector<eval::CodeProblem>& probs) {
    const std::string path = dir + "/" + task + ".jsonl";
    std::map<std::string, json> done;
    {
      std::ifstream in(path);
      std::string line;
      int ln = 0;
      while (std::getline(in, line)) {
        ++ln;
        if (line.empty()) continue;
        try {
          json j = json::parse(line);
          done[j.at("task_id").get<std::string>()] = j;
        } catch (const std::exception&) {
          // A line cut short by an interrupted run: that problem runs again.
          HC_LOG_WARN("%s:%d: unreadable result line, the problem runs again", path.c_str(), ln);
        }
      }
    }
    const int64_t n = f.limit >= 0 ? std::min<int64_t>(f.limit, probs.size()) : probs.size();
    std::ofstream out(path, std::ios::app);
    if (!out) return Status::Error("cannot open '" + path + "' for appending");
    eval::SandboxLimits lim;
    lim.wall_s = f.timeout;
    lim.cpu_s = std::max(1, static_cast<int>(std::ceil(f.timeout)));
    int64_t passed = 0, counted = 0;
    double toks = 0, secs = 0;
    ProgressBar bar(task, n, "problems");
    int64_t resumed = 0;
    for (int64_t i = 0; i < n; ++i) {
      const eval::CodeProblem& p = probs[static_cast<size_t>(i)];
      auto it = done.find(p.task_id);
      json r;
      if (it != done.end()) {
        r = it->second;
        ++resumed;
        // Speed over every problem, whichever run made it.
        gen_tokens += r.value("gen_tokens", 0.0);
        gen_seconds += r.value("gen_s", 0.0);
        prompt_tokens += r.value("prompt_tokens", 0.0);
        prompt_seconds += r.value("prompt_s", 0.0);
      } else {
        ++fresh;
        int n_gen = 0;
        const double g0 = gen_seconds, p0 = prompt_seconds, pt0 = prompt_tokens;
        HC_ASSIGN_OR_RETURN(std::string completion, complete(p, &n_gen));
        const double g = gen_seconds - g0;
        HC_ASSIGN_OR_RETURN(eval::SandboxResult sr,
                            eval::run_python(eval::build_program(p, completion), lim));
        r = json{{"task_id", p.task_id},
                 {"passed", sr.outcome == eval::Outcome::kPassed},
                 {"outcome", eval::outcome_name(sr.outcome)},
                 {"detail", sr.detail},
                 {"gen_tokens", n_gen},
                 {"gen_s", g},
                 {"prompt_tokens", prompt_tokens - pt0},
                 {"prompt_s", prompt_seconds - p0},
                 {"completion", completion}};
        out << dump(r, -1) << "\n";
        out.flush();
      }
      ++counted;
      passed += r.value("passed", false) ? 1 : 0;
      toks += r.value("gen_tokens", 0.0);
      secs += r.value("gen_s", 0.0);
      char ex[48];
      std::snprintf(ex, sizeof ex, "pass@1 %.3f", double(passed) / double(counted));
      bar.update(i + 1, toks, ex);
    }
    if (resumed) HC_LOG_INFO("%s: %lld problems resumed from %s", task.c_str(),
                             static_cast<long long>(resumed), path.c_str());
    const eval::Interval ci = eval::wilson_interval(static_cast<int>(passed),
                                                    static_cast<int>(counted));
    return json{{"pass@1", counted ? double(passed) / double(counted) : 0.0},
                {"pass@1_ci95", json::array({ci.lo, ci.hi})},
                {"passed", passed},
                {"problems", counted},
                {"gen_tokens", toks},
                {"gen_tok_s", secs > 0 ? toks / secs : 0.0}};
  }
};

Status run_config(const EvalFlags& f, const std::vector<std::string>& tasks,
                  const std::string& label) {
  ModelFlags mf = f.model;
  if (mf.ctx == 0) mf.ctx = 2048;
  f.sparse.apply_to(&mf);
  HC_ASSIGN_OR_RETURN(auto model, load_model_logged(mf));
  HC_ASSIGN_OR_RETURN(auto sparse, sparse_from_flags(f.sparse, *model));
  Runner r{f, model};
  r.dir = f.out + "/" + label;
  if (f.chat) {
    std::string tmpl = f.chat_template;
    if (tmpl.empty()) {
      auto from_file = model->gguf().get_string("tokenizer.chat_template");
      if (!from_file.ok())
        return Status::Error("--chat: the model has no tokenizer.chat_template; name one with "
                             "--chat-template");
      tmpl = *from_file;
    }
    HC_ASSIGN_OR_RETURN(r.chat_template, detect_chat_template(tmpl));
  }
  std::error_code ec;
  fs::create_directories(r.dir, ec);
  if (ec) return Status::Error("cannot create '" + r.dir + "': " + ec.message());
  SessionParams sp = session_params(mf);
  sp.n_ctx = std::max(mf.ctx, f.ppl_ctx);
  sp.n_batch = std::max(mf.batch, f.ppl_ctx);
  r.session = std::make_unique<Session>(model, sp);
  r.n_ctx = r.session->n_ctx();
  r.session->set_sparse(sparse);
  DeviceModel* placed = nullptr;
  HC_TRY(attach_device(*r.session, f.device, f.sparse, f.model.model, sparse, &placed));
  // Static configurations get a watching-only monitor, so every configuration reports the same
  // statistics (recall, sparsity, share of firing mass on the device).
  if (!sparse && f.dynamic.enabled())
    return Status::Error("--dynamic / --migrate need a sparse FFN (--sparsity S --stats FILE, "
                         "--sparse or --predictor)");
  DynamicFlags dflags = f.dynamic;
  dflags.watch = sparse != nullptr;
  HC_ASSIGN_OR_RETURN(r.dyn, attach_dynamic(*r.session, dflags, sparse.get(), placed,
                                            f.sparse.stats));
  json summary{{"label", label}, {"config", config_json(f)}, {"tasks", json::object()}};
  const double t_all = now_seconds();
  for (const std::string& task : tasks) {
    json res;
    const std::string ppl_file = r.dir + "/" + task + ".json";
    if (task == "wikitext2" || task == "tinystories" || task == "code-ppl") {
      if (fs::exists(ppl_file)) {  // resumable: a finished perplexity is kept
        HC_ASSIGN_OR_RETURN(res, read_json(ppl_file));
        HC_LOG_INFO("%s: kept from %s", task.c_str(), ppl_file.c_str());
      } else if (task == "code-ppl") {
        ++r.fresh;
        HC_ASSIGN_OR_RETURN(auto probs,
                            eval::load_humaneval(f.data + "/" + eval_task_file(task)));
        HC_ASSIGN_OR_RETURN(res, r.code_ppl(probs));
      } else {
        ++r.fresh;
        HC_ASSIGN_OR_RETURN(res, r.perplexity(task, f.data + "/" + eval_task_file(task)));
      }
      if (!fs::exists(ppl_file)) HC_TRY(write_text(ppl_file, dump(res, 2) + "\n"));
    } else {
      HC_ASSIGN_OR_RETURN(auto probs,
                          task == "humaneval"
                              ? eval::load_humaneval(f.data + "/" + eval_task_file(task))
                              : eval::load_mbpp(f.data + "/" + eval_task_file(task)));
      HC_ASSIGN_OR_RETURN(res, r.code_task(task, probs));
    }
    summary["tasks"][task] = res;
  }
  // A rerun with nothing left to compute keeps the earlier run's figures of its work (sparsity,
  // recall, device, migration, trace): this process measured nothing to replace them with.
  const std::string summary_file = r.dir + "/summary.json";
  if (r.fresh == 0 && fs::exists(summary_file)) {
    HC_ASSIGN_OR_RETURN(json earlier, read_json(summary_file));
    for (const char* part : {"speed", "sparse", "device", "dynamic"})
      if (earlier.contains(part)) summary[part] = earlier[part];
    HC_LOG_INFO("%s: every task resumed; kept the earlier run's speed and statistics",
                label.c_str());
    return write_text(summary_file, dump(summary, 2) + "\n");
  }
  // Speed, memory and sparsity of this process's work.
  json speed{{"gen_tok_s", r.gen_seconds > 0 ? r.gen_tokens / r.gen_seconds : 0.0},
             {"gen_tokens", r.gen_tokens},
             {"prompt_tok_s", r.prompt_seconds > 0 ? r.prompt_tokens / r.prompt_seconds : 0.0},
             {"seconds", now_seconds() - t_all},
             {"peak_rss_mib", peak_rss_bytes() / 1048576.0}};
  summary["speed"] = speed;
  if (sparse) {
    const SparseStats& st = r.session->sparse_stats();
    summary["sparse"] = {{"sparsity", st.sparsity()},
                         {"computed_share", st.neurons ? double(st.computed) / double(st.neurons) : 0.0}};
  }
  if (const DeviceModel* dm = r.session->device_model()) {
    const ops::Device& dev = dm->device();
    summary["device"] = {{"name", dev.name()},
                         {"charged_mib", dev.charged_bytes() / 1048576.0},
                         {"measured_mib", dev.measured_bytes() / 1048576.0},
                         {"budget_mib", dev.budget_bytes() == UINT64_MAX
                                            ? -1.0
                                            : dev.budget_bytes() / 1048576.0},
                         {"hot_neurons", dm->n_hot_neurons()},
                         {"attn_layers", dm->n_attn_layers()}};
  }
  if (r.dyn) {
    const DynamicTotals& t = r.dyn->totals();
    summary["dynamic"] = {{"audited_tokens", t.audited_tokens},
                          {"recall", t.recall()},
                          {"sparsity", t.sparsity()},
                          {"device_mass_share",
                           placed ? json(t.device_mass_share()) : json(nullptr)},
                          {"device_fired_share",
                           placed ? json(t.device_fired_share()) : json(nullptr)},
                          {"swaps", t.swaps},
                          {"migrated_mib", t.migrated_bytes / 1048576.0},
                          {"observe_s", t.observe_seconds},
                          {"migrate_s", t.migrate_seconds}};
    std::string csv = "tokens,device_mass,device_fired,recall,sparsity,mean_threshold,migrated\n";
    for (const DynamicTracePoint& p : r.dyn->trace()) {
      char line[160];
      std::snprintf(line, sizeof line, "%llu,%.5f,%.5f,%.5f,%.5f,%.6g,%llu\n",
                    static_cast<unsigned long long>(p.tokens), p.device_mass, p.device_fired,
                    p.recall, p.sparsity, p.mean_threshold,
                    static_cast<unsigned long long>(p.migrated));
      csv += line;
    }
    HC_TRY(write_text(r.dir + "/trace.csv", csv));
    HC_LOG_INFO("%s", r.dyn->summary().c_str());
  }
  return write_text(summary_file, dump(summary, 2) + "\n");
}

// ---- report: every configuration under OUT -------------------------------------------------

double num(const json& j, const std::vector<std::string>& path, double dflt = NAN) {
  const json* p = &j;
  for (const std::string& k : path) {
    if (!p->is_object() || !p->contains(k)) return dflt;
    p = &(*p)[k];
  }
  return p->is_number() ? p->get<double>() : dflt;
}

std::string cell(double v, const char* fmt) {
  if (std::isnan(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// A task's pass@1 with its 95% Wilson interval over the problems run: "0.061 (0.033-0.109)".
std::string pass_cell(const json& r, const std::string& task) {
  const double rate = num(r, {"tasks", task, "pass@1"});
  const double passed = num(r, {"tasks", task, "passed"});
  const double n = num(r, {"tasks", task, "problems"});
  if (std::isnan(rate) || std::isnan(passed) || std::isnan(n) || n < 1) return cell(rate, "%.3f");
  const eval::Interval ci = eval::wilson_interval(static_cast<int>(passed), static_cast<int>(n));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f (%.3f-%.3f)", rate, ci.lo, ci.hi);
  return buf;
}

// Axis range [lo, hi] padded and rounded to `step`.
void axis(double lo, double hi, double* a, double* b, double* step) {
  if (!(hi > lo)) {
    lo -= 0.5;
    hi += 0.5;
  }
  const double span = hi - lo;
  const double raw = span / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double s = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      s = m * mag;
      break;
    }
  *a = std::floor(lo / s) * s;
  *b = std::ceil(hi / s) * s;
  if (*b <= *a) *b = *a + s;
  *step = s;
}

Status plot(const std::string& path, LinePlot p) {
  double xl = INFINITY, xh = -INFINITY, yl = INFINITY, yh = -INFINITY;
  int n = 0;
  for (const PlotSeries& s : p.series)
    for (auto [x, y] : s.points) {
      xl = std::min(xl, x), xh = std::max(xh, x), yl = std::min(yl, y), yh = std::max(yh, y);
      ++n;
    }
  if (n == 0) return Status::Ok();  // nothing measured for this plot
  double sx, sy;
  axis(xl, xh, &p.x_min, &p.x_max, &sx);
  axis(yl, yh, &p.y_min, &p.y_max, &sy);
  p.grid_step = p.label_step = sx;
  p.y_grid_step = p.y_label_step = sy;
  for (size_t i = 0; i < p.series.size(); ++i)
    p.series[i].color = series_color(static_cast<int>(i), static_cast<int>(p.series.size()));
  const Image img = render_line_plot(p, 1000, 640);
  return write_then_rename(path, [&](const std::string& tmp) { return write_png(tmp, img); });
}

LinePlot line_plot(std::string title, std::string x_label, std::string y_label,
                   std::string legend) {
  LinePlot p;
  p.title = std::move(title);
  p.x_label = std::move(x_label);
  p.y_label = std::move(y_label);
  p.legend_title = std::move(legend);
  return p;
}

// A series of `p`: for every run `keep` accepts, (x(run), y(run)) when both are finite, by x.
void add_series(LinePlot* p, const std::string& label, const std::vector<json>& runs,
                const std::function<bool(const json&)>& keep,
                const std::function<double(const json&)>& x,
                const std::function<double(const json&)>& y) {
  PlotSeries s{label, {}, {}};
  for (const json& r : runs) {
    if (!keep(r)) continue;
    const double a = x(r), b = y(r);
    if (std::isfinite(a) && std::isfinite(b)) s.points.push_back({a, b});
  }
  std::sort(s.points.begin(), s.points.end());
  if (!s.points.empty()) p->series.push_back(std::move(s));
}

Status report(const std::string& out) {
  std::vector<json> runs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const fs::path s = e.path() / "summary.json";
    if (!e.is_directory() || !fs::exists(s)) continue;
    HC_ASSIGN_OR_RETURN(json j, read_json(s.string()));
    runs.push_back(std::move(j));
  }
  if (ec) return Status::Error("cannot list '" + out + "': " + ec.message());
  std::sort(runs.begin(), runs.end(), [](const json& a, const json& b) {
    return a.value("label", "") < b.value("label", "");
  });
  HC_TRY(write_text(out + "/results.json", dump(json(runs), 2) + "\n"));
  std::string md =
      "| label | sparsity (measured) | wikitext2 PPL | tinystories PPL | code PPL | HumanEval "
      "pass@1 (95% interval) | MBPP pass@1 (95% interval) | gen tok/s | recall | firing mass on device | device MiB | "
      "migrated |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const json& r : runs) {
    md += "| " + r.value("label", "?") + " | " + cell(num(r, {"sparse", "sparsity"}), "%.3f") +
          " | " + cell(num(r, {"tasks", "wikitext2", "ppl"}), "%.3f") + " | " +
          cell(num(r, {"tasks", "tinystories", "ppl"}), "%.3f") + " | " +
          cell(num(r, {"tasks", "code-ppl", "ppl"}), "%.3f") + " | " +
          pass_cell(r, "humaneval") + " | " + pass_cell(r, "mbpp") + " | " +
          cell(num(r, {"speed", "gen_tok_s"}), "%.1f") + " | " +
          cell(num(r, {"dynamic", "recall"}), "%.4f") + " | " +
          cell(num(r, {"dynamic", "device_mass_share"}), "%.3f") + " | " +
          cell(num(r, {"device", "charged_mib"}), "%.1f") + " | " +
          cell(num(r, {"dynamic", "swaps"}), "%.0f") + " |\n";
  }
  HC_TRY(write_text(out + "/results.md", md));

  // Accuracy vs sparsity: perplexities relative to the dense run's, and pass@1.
  LinePlot acc = line_plot("ACCURACY VS SPARSITY", "MEASURED FFN SPARSITY",
                           "LOG10 (PPL / DENSE PPL)", "TASK");
  const json* dense = nullptr;
  for (const json& r : runs)
    if (!r.contains("sparse")) dense = &r;
  auto cfg = [](const json& r) { return r.value("config", json::object()); };
  auto host = [&](const json& r) { return cfg(r).value("device", "none") == "none"; };
  auto sparsity = [](const json& r) {
    return r.contains("sparse") ? num(r, {"sparse", "sparsity"}) : 0.0;
  };
  // Accuracy does not depend on placement: host runs only, static and dynamic apart.
  for (const bool dyn : {false, true})
    for (const char* t : {"wikitext2", "tinystories", "code-ppl"}) {
      const double base = dense ? num(*dense, {"tasks", t, "ppl"}) : NAN;
      add_series(&acc, std::string(t) + (dyn ? " DYNAMIC" : ""), runs,
                 [&](const json& r) { return host(r) && cfg(r).value("dynamic", false) == dyn; },
                 sparsity,
                 [&](const json& r) { return std::log10(num(r, {"tasks", t, "ppl"}) / base); });
    }
  HC_TRY(plot(out + "/ppl_vs_sparsity.png", acc));
  LinePlot pass = line_plot("PASS@1 VS SPARSITY", "MEASURED FFN SPARSITY", "PASS@1", "TASK");
  for (const char* t : {"humaneval", "mbpp"})
    add_series(&pass, t, runs, host, sparsity,
               [&](const json& r) { return num(r, {"tasks", t, "pass@1"}); });
  HC_TRY(plot(out + "/pass_vs_sparsity.png", pass));
  // Tokens/s vs device budget, static vs dynamic placement.
  LinePlot tps = line_plot("TOKENS/S VS DEVICE BUDGET", "DEVICE BUDGET GIB",
                           "GENERATION TOKENS/S", "PLACEMENT");
  for (const bool mig : {false, true})
    add_series(
        &tps, mig ? "DYNAMIC" : "STATIC", runs,
        [&](const json& r) {
          return cfg(r).value("migrate", false) == mig && cfg(r).contains("vram_budget_gib") &&
                 cfg(r)["vram_budget_gib"].is_number();
        },
        [&](const json& r) { return cfg(r)["vram_budget_gib"].get<double>(); },
        [&](const json& r) { return num(r, {"speed", "gen_tok_s"}); });
  HC_TRY(plot(out + "/toks_vs_budget.png", tps));
  // Share of firing mass on the device over time, per configuration with a device.
  LinePlot hit = line_plot("FIRING MASS ON THE DEVICE OVER TIME", "TOKENS (THOUSANDS)",
                           "SHARE ON DEVICE", "CONFIGURATION");
  for (const json& r : runs) {
    std::ifstream in(out + "/" + r.value("label", "") + "/trace.csv");
    std::string line;
    std::getline(in, line);  // header
    PlotSeries s{r.value("label", "?"), {}, {}};
    // Averages over windows of ~500 tokens: single tokens are noisy.
    double wt = 0, wsum = 0, last = 0;
    int wn = 0;
    while (std::getline(in, line)) {
      double tokens, dm;
      if (std::sscanf(line.c_str(), "%lf,%lf", &tokens, &dm) != 2 || dm < 0) continue;
      wsum += dm;
      ++wn;
      wt = tokens;
      if (wt - last >= 500) {
        s.points.push_back({wt / 1000.0, wsum / wn});
        wsum = 0, wn = 0, last = wt;
      }
    }
    if (wn > 0) s.points.push_back({wt / 1000.0, wsum / wn});
    if (s.points.size() > 1) hit.series.push_back(s);
  }
  HC_TRY(plot(out + "/device_share_over_time.png", hit));
  std::printf("%s", md.c_str());
  HC_LOG_INFO("eval: %zu configurations; wrote %s/results.json, results.md and plots", runs.size(),
              out.c_str());
  return Status::Ok();
}

}  // namespace

int cmd_eval(const Args& args) {
  EvalFlags f;
  ArgParser p(kCmd,
              "accuracy (perplexity, HumanEval / MBPP pass@1), speed and memory of one "
              "configuration; results under --out, merged over configurations");
  add_model_flags(p, &f.model);
  add_sparse_flags(p, &f.sparse);
  add_device_flags(p, &f.device);
  add_dynamic_flags(p, &f.dynamic);
  p.add_string("--tasks", &f.tasks,
               "comma-separated: wikitext2, tinystories, code-ppl, humaneval, mbpp");
  p.add_int("--limit", &f.limit, "problems per code task (default: all)");
  p.add_int("--n-predict", &f.n_predict, "tokens per completion");
  p.add_int("--ppl-chunks", &f.ppl_chunks, "perplexity chunks per text");
  p.add_int("--ppl-ctx", &f.ppl_ctx, "perplexity chunk length");
  p.add_float("--timeout", &f.timeout, "seconds per test program in the sandbox");
  p.add_flag("--chat", &f.chat,
             "instruct models: ask for each code problem in a chat turn (the model's template) "
             "with the answer's code block opened");
  p.add_string("--chat-template", &f.chat_template,
               "chat template family or Jinja text for --chat (default: the model's)");
  p.add_string("--data", &f.data,
               "data folder (default: $HOTCOLD_DATA, ../shared/data, the installed "
               "share/hotcold/data, or the checkout's ../shared/data beside the build)");
  p.add_string("-o,--out", &f.out, "results directory");
  p.add_string("--label", &f.label, "name of this configuration (default: from the flags)");
  p.add_flag("--report", &f.report_only,
             "only rebuild results.json, results.md and the plots from --out");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  if (f.report_only) return exit_code_for(kCmd, report(f.out));
  if (f.model.model.empty()) return usage_error(kCmd, "expected -m MODEL");
  auto tasks = parse_tasks(f.tasks);
  if (!tasks.ok()) return usage_error(kCmd, tasks.status().message());
  if (f.limit < -1) return usage_error(kCmd, "--limit: expected N >= 0");
  if (f.n_predict < 1) return usage_error(kCmd, "--n-predict: expected N >= 1");
  if (f.ppl_chunks < 1) return usage_error(kCmd, "--ppl-chunks: expected N >= 1");
  if (f.ppl_ctx < 16) return usage_error(kCmd, "--ppl-ctx: expected N >= 16");
  if (!(f.timeout > 0)) return usage_error(kCmd, "--timeout: expected seconds > 0");
  if (Result<DynamicOptions> o = dynamic_options(f.dynamic); !o.ok())
    return usage_error(kCmd, o.status().message());
  std::string label = f.label.empty() ? default_label(f) : f.label;
  if (label.find('/') != std::string::npos || label == "." || label == "..")
    return usage_error(kCmd, "--label: expected a plain name, found '" + label + "'");
  std::vector<std::string> files;
  for (const std::string& t : *tasks) files.push_back(eval_task_file(t));
  Result<std::string> data = find_eval_data(f.data, files);
  if (!data.ok()) return exit_code_for(kCmd, data.status());
  f.data = *data;
  if (Status st = run_config(f, *tasks, label); !st.ok()) return exit_code_for(kCmd, st);
  return exit_code_for(kCmd, report(f.out));
}

}  // namespace hc
