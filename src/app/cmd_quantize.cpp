// hotcold quantize -m IN -o OUT --type T: llama-quantize for the types this engine computes
// with. The per-tensor rules live in model/quantize_plan.h; this file parses flags, reports
// progress on stderr and writes the result.
#include <sys/stat.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <thread>

#include "app/commands.h"
#include "app/common.h"
#include "core/thread_pool.h"
#include "format/gguf.h"
#include "model/quantize_plan.h"

namespace hc {

namespace {

constexpr char kCmd[] = "quantize";

// Writing over the input would truncate the file that is still mapped (SIGBUS).
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (stat(a.c_str(), &sa) != 0 || stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

double mib(uint64_t n) { return n / (1024.0 * 1024.0); }

}  // namespace

int cmd_quantize(const Args& args) {
  std::string in_path, out_path, type_name, pos_in, pos_out, pos_type;
  int n_threads = static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
  bool pure = false, dry_run = false;
  ArgParser p(kCmd,
              "Convert a GGUF model's weight matrices to another type, following llama.cpp's\n"
              "llama-quantize rules (norms and 1-D tensors are copied unchanged).\n"
              "Types (case-insensitive): " + quantize_target_names() + ".\n"
              "Q4_K / Q5_K are uniform; Q4_K_S/M and Q5_K_S/M are llama.cpp's mixtures.");
  p.add_positional("IN", &pos_in, false, "input GGUF (or -m)");
  p.add_positional("OUT", &pos_out, false, "output GGUF (or -o)");
  p.add_positional("TYPE", &pos_type, false, "target type (or --type)");
  add_model_option(p, &in_path, "input GGUF model (a file or a cached model's name)");
  p.add_string("-o,--output", &out_path, "output GGUF file");
  p.add_string("--type", &type_name, "target type, e.g. Q4_K_M, Q8_0, F16");
  p.add_int("-t,--threads", &n_threads, "threads used for conversion");
  p.add_flag("--pure", &pure, "no mixture rules: every converted tensor gets the target type");
  p.add_flag("--dry-run", &dry_run, "print the per-tensor plan, write nothing");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  // Flags and positionals are alternatives; a conflicting pair is a usage error.
  struct Pick { std::string* flag; const std::string* pos; const char* what; };
  for (Pick k : {Pick{&in_path, &pos_in, "input"}, Pick{&out_path, &pos_out, "output"},
                 Pick{&type_name, &pos_type, "type"}}) {
    if (!k.flag->empty() && !k.pos->empty() && *k.flag != *k.pos)
      return usage_error(kCmd, std::string(k.what) + " given twice ('" + *k.flag + "' and '" +
                                   *k.pos + "')");
    if (k.flag->empty()) *k.flag = *k.pos;
  }
  const char* missing = in_path.empty() ? "an input model (-m IN)"
                        : out_path.empty() && !dry_run ? "an output file (-o OUT)"
                        : type_name.empty() ? "a target type (--type T)"
                                            : nullptr;
  if (missing)
    return usage_error(kCmd,
                       std::string("expected ") + missing + "; see 'hotcold quantize --help'");
  if (n_threads < 1 || n_threads > 1024)
    return usage_error(kCmd, "--threads: expected 1..1024, found " + std::to_string(n_threads));
  auto target = parse_quantize_target(type_name);
  if (!target.ok()) return usage_error(kCmd, "--type: " + target.message());
  if (pure) target->pure = true;
  if (!dry_run && same_file(in_path, out_path))
    return usage_error(kCmd, "output '" + out_path + "' is the input file; choose another path");

  auto mapped = open_model_gguf(in_path);
  if (!mapped.ok()) return exit_code_for(kCmd, mapped.status());
  const GgufFile& in = mapped->gguf;

  if (dry_run) {
    auto plan = plan_quantization(in, *target);
    if (!plan.ok()) return exit_code_for(kCmd, plan.status());
    for (size_t i = 0; i < plan->size(); ++i) {
      const TensorQuantPlan& e = (*plan)[i];
      std::printf("%-40s %-24s %-5s -> %-5s%s%s\n", e.name.c_str(),
                  shape_string(in.tensors[i].ne).c_str(), dtype_name(e.from), dtype_name(e.to),
                  e.note.empty() ? "" : "  # ", e.note.c_str());
    }
    return 0;
  }

  std::fprintf(stderr, "hotcold quantize: %s -> %s as %s%s (general.file_type %u), %d threads\n",
               in_path.c_str(), out_path.c_str(), target->name.c_str(),
               target->pure ? " (uniform)" : "", static_cast<unsigned>(target->ftype), n_threads);
  ThreadPool pool(n_threads);
  auto progress = [&](size_t i, size_t n, const TensorQuantPlan& e, uint64_t bytes) {
    const GgufTensorInfo& t = in.tensors[i];
    std::fprintf(stderr, "[%4zu/%4zu] %-36s %-20s %5s -> %-5s %10.3f -> %10.3f MiB%s%s\n", i + 1,
                 n, e.name.c_str(), shape_string(t.ne).c_str(), dtype_name(e.from),
                 dtype_name(e.to), mib(t.nbytes), mib(bytes), e.note.empty() ? "" : "  (",
                 e.note.empty() ? "" : (e.note + ")").c_str());
  };
  auto out = quantize_model(in, *target, &pool, progress);
  if (!out.ok()) return exit_code_for(kCmd, out.status());
  Status written = write_then_rename(
      out_path, [&](const std::string& tmp_path) { return out->writer.write_file(tmp_path); });
  if (!written.ok()) return exit_code_for(kCmd, written);
  size_t n_converted = 0;
  for (const auto& e : out->plan) n_converted += e.convert ? 1 : 0;
  std::fprintf(stderr,
               "hotcold quantize: wrote %s: %zu tensors (%zu converted), %.3f MiB -> %.3f MiB\n",
               out_path.c_str(), out->plan.size(), n_converted, mib(out->bytes_in),
               mib(out->bytes_out));
  return 0;
}

}  // namespace hc
