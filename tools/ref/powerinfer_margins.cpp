// powerinfer_margins: PowerInfer's logit margins along a greedy continuation, for the goldens
// of tests/reference/test_powerinfer_parity.py (tools/ref/powerinfer_goldens.py runs it; built
// against PowerInfer's libllama by tools/ref/powerinfer_build.sh).
//
//   powerinfer_margins MODEL THREADS N_CTX PROMPT_IDS CONTINUATION_IDS
//
// The ids are comma-separated (PROMPT_IDS with BOS, as `main` evaluated them; CONTINUATION_IDS
// the ids `main` generated, may be empty). The prompt is decoded as one batch, then the
// continuation one token at a time (teacher-forced, as `main` decodes it). Before each
// continuation token and after the last one, one line on stdout:
//   STEP ARGMAX TOP1 TOP2
// ARGMAX the greedy choice (lowest id on ties, as llama_sample_token_greedy), TOP1 / TOP2 the
// largest two logits (%.9g). A greedy divergence where TOP1 - TOP2 is tiny is a near-tie that
// rounding differences flip; a large one is a real discrepancy.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

static std::vector<llama_token> parse_ids(const char* s) {
  std::vector<llama_token> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) ids.push_back(static_cast<llama_token>(std::atoi(item.c_str())));
  return ids;
}

static void report(llama_context* ctx, int n_vocab, int step) {
  const float* lg = llama_get_logits(ctx);
  int best = 0;
  for (int i = 1; i < n_vocab; ++i)
    if (lg[i] > lg[best]) best = i;
  float second = -INFINITY;
  for (int i = 0; i < n_vocab; ++i)
    if (i != best && lg[i] > second) second = lg[i];
  std::printf("%d %d %.9g %.9g\n", step, best, lg[best], second);
}

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s MODEL THREADS N_CTX PROMPT_IDS CONTINUATION_IDS\n", argv[0]);
    return 2;
  }
  std::vector<llama_token> prompt = parse_ids(argv[4]);
  std::vector<llama_token> cont = parse_ids(argv[5]);
  if (prompt.empty()) {
    std::fprintf(stderr, "empty prompt\n");
    return 2;
  }
  llama_backend_init(false);
  llama_model_params mparams = llama_model_default_params();
  llama_context_params cparams = llama_context_default_params();
  cparams.n_ctx = static_cast<uint32_t>(std::atoi(argv[3]));
  cparams.n_batch = cparams.n_ctx;
  cparams.n_threads = cparams.n_threads_batch = static_cast<uint32_t>(std::atoi(argv[2]));
  cparams.seed = 1;
  llama_model* model = llama_load_model_from_file_with_context(argv[1], mparams, &cparams);
  if (!model) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  llama_context* ctx = llama_new_context_with_model(model, cparams);
  if (!ctx) {
    std::fprintf(stderr, "cannot create a context\n");
    return 1;
  }
  const int n_vocab = llama_n_vocab(model);
  if (llama_decode(ctx,
                   llama_batch_get_one(prompt.data(), static_cast<int32_t>(prompt.size()), 0, 0))) {
    std::fprintf(stderr, "decode failed (prompt)\n");
    return 1;
  }
  int pos = static_cast<int>(prompt.size());
  for (size_t k = 0; k <= cont.size(); ++k) {
    report(ctx, n_vocab, static_cast<int>(k));
    if (k == cont.size()) break;
    if (llama_decode(ctx, llama_batch_get_one(&cont[k], 1, pos++, 0))) {
      std::fprintf(stderr, "decode failed (step %zu)\n", k);
      return 1;
    }
  }
  llama_free(ctx);
  llama_free_model(model);
  llama_backend_free();
  return 0;
}
