// hotcold inspect MODEL: header, every metadata key, the tensor table and size totals of a
// GGUF file. Shapes are printed in ggml order (ne[0], the contiguous row length, first), as
// llama.cpp's tools print them.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <string>

#include "app/commands.h"
#include "app/common.h"
#include "app/model_cache.h"
#include "core/dtype.h"
#include "format/gguf.h"

namespace hc {

namespace {

constexpr char kCmd[] = "inspect";

// Metadata strings (chat templates, merges) may hold control characters; keep one key a line.
void print_metadata(const GgufFile& f, size_t max_elems) {
  std::printf("\nmetadata: %zu keys\n", f.kv.size());
  size_t width = 0;
  for (const auto& [key, v] : f.kv) width = std::max(width, key.size());
  for (const auto& [key, v] : f.kv) {
    const char* type = v.is_array() ? "array" : gguf_type_name(v.type);
    std::printf("  %-*s  %-7s  %s\n", static_cast<int>(width), key.c_str(), type,
                escape_control(v.to_string(max_elems), /*quoted=*/false).c_str());
  }
}

void print_tensors(const GgufFile& f) {
  std::printf("\ntensors: %zu (shape in ggml order, ne[0] first)\n", f.tensors.size());
  if (f.tensors.empty()) return;
  size_t width = 4;
  for (const auto& t : f.tensors) width = std::max(width, t.name.size());
  std::printf("  %5s  %-*s  %-7s  %-24s  %12s  %12s\n", "#", static_cast<int>(width), "name",
              "type", "shape", "bytes", "offset");
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const GgufTensorInfo& t = f.tensors[i];
    std::printf("  %5zu  %-*s  %-7s  %-24s  %12" PRIu64 "  %12" PRIu64 "\n", i,
                static_cast<int>(width), t.name.c_str(), dtype_name(t.type),
                shape_string(t.ne).c_str(), t.nbytes, t.offset);
  }
}

void print_totals(const GgufFile& f) {
  struct PerType {
    int n_tensors = 0;
    int64_t n_params = 0;
    uint64_t n_bytes = 0;
  };
  std::map<std::string, PerType> by_type;
  int64_t n_params = 0;
  uint64_t n_bytes = 0;
  for (const auto& t : f.tensors) {
    PerType& p = by_type[dtype_name(t.type)];
    ++p.n_tensors;
    p.n_params += t.n_elements();
    p.n_bytes += t.nbytes;
    n_params += t.n_elements();
    n_bytes += t.nbytes;
  }
  std::printf("\ntotals: %" PRId64 " parameters, %" PRIu64 " bytes (%s)", n_params, n_bytes,
              human_bytes(n_bytes).c_str());
  if (n_params > 0) std::printf(", %.3f bits per weight", 8.0 * n_bytes / n_params);
  std::printf("\n");
  for (const auto& [name, p] : by_type) {
    std::printf("  %-7s  %4d tensors  %14" PRId64 " parameters  %14" PRIu64 " bytes (%s)\n",
                name.c_str(), p.n_tensors, p.n_params, p.n_bytes, human_bytes(p.n_bytes).c_str());
  }
}

}  // namespace

int cmd_inspect(const Args& args) {
  std::string model, model_pos;
  int max_elems = 8;
  bool no_tensors = false;
  ArgParser p(kCmd, "Show a GGUF file's header, metadata, tensor table and size totals.");
  p.add_positional("MODEL", &model_pos, false, "GGUF file (or use -m)");
  add_model_option(p, &model, "GGUF file (or a cached model's name) to inspect");
  p.add_int("--max-elems", &max_elems, "array elements shown per metadata key");
  p.add_flag("--no-tensors", &no_tensors, "omit the per-tensor table");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  model_pos = resolve_model_arg(model_pos);
  if (!model.empty() && !model_pos.empty() && model != model_pos)
    return usage_error(kCmd,
                       "two models given ('" + model + "' and '" + model_pos + "'); give one");
  if (model.empty()) model = model_pos;
  if (model.empty()) return usage_error(kCmd, "no model given; usage: hotcold inspect MODEL");
  if (max_elems < 0)
    return usage_error(kCmd, "--max-elems: expected >= 0, found " + std::to_string(max_elems));

  auto mapped = open_model_gguf(model);
  if (!mapped.ok()) return exit_code_for(kCmd, mapped.status());
  const GgufFile& f = mapped->gguf;
  std::printf("file: %s (%zu bytes)\n", model.c_str(), mapped->file.bytes().size());
  std::printf("magic: %s, version %u, alignment %" PRIu64 ", data offset %" PRIu64 "\n",
              f.powerinfer_magic ? "PWRI" : "GGUF", f.version, f.alignment, f.data_offset);
  print_metadata(f, static_cast<size_t>(max_elems));
  if (!no_tensors) print_tensors(f);
  print_totals(f);
  return 0;
}

}  // namespace hc
