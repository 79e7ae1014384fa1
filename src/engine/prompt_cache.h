// Reusing the KV cache of earlier prompts (hotcold serve's prompt cache): a slot keeps its
// tokens' KV after its request ends, and a bounded store in host memory keeps prefixes that
// slots had to give up (least recently used evicted first), so a repeated system prompt or
// chat history is not computed again.
//
// Invariant: reuse never changes a result. A prompt is evaluated in n_batch chunks from
// position 0, each in micro-batches (llama_forward), and the arithmetic of a position depends
// only on its micro-batch's tokens and the positions before it. So a reused prefix is cut to
// whole micro-batches of the prompt-processing grid (reuse_unit) and to positions that were
// prompt-processed (never decode steps, whose arithmetic differs), and what is left is
// evaluated on the same grid: the KV and logits are those of a fresh evaluation, and greedy
// output equals `hotcold run` with the same -b, whatever was cached before.
#pragma once
#include <cstdint>
#include <list>
#include <span>
#include <vector>

#include "model/kv_cache.h"

namespace hc {

// Positions on the prompt-processing grid: chunks of n_batch from 0, micro-batches of ubatch
// inside each (the last chunk and micro-batch may be short). A prefix of a multiple of this
// many positions consists of whole micro-batches, each starting where a fresh evaluation's does.
int64_t reuse_unit(int64_t n_batch, int64_t ubatch);

// How much of `prompt` can reuse a cache holding `cached` tokens whose first `computed` were
// prompt-processed on the grid: the common prefix, at most `computed`, at most prompt.size() - 1
// (the last prompt token is always evaluated, for its logits), rounded down to `unit`.
int64_t reusable_prefix(std::span<const int32_t> cached, int64_t computed,
                        std::span<const int32_t> prompt, int64_t unit);

class PromptCache {
 public:
  // budget_bytes: the most KV bytes kept (0: nothing is kept).
  explicit PromptCache(uint64_t budget_bytes) : budget_(budget_bytes) {}

  // Keeps positions [0, tokens.size()) of `cache` under those tokens (all prompt-processed on
  // the grid). An entry that is a prefix of them is replaced; if an entry already holds them
  // all (or more), it is only marked used. Older entries are evicted until the new one fits;
  // an entry larger than the whole budget is not kept.
  void save(std::span<const int32_t> tokens, const KvCache& cache);

  struct Match {
    int64_t n_reuse = 0;  // positions reusable (reusable_prefix); 0: no match
    const void* entry = nullptr;
  };
  // The entry from which most of `prompt` can be reused.
  Match best(std::span<const int32_t> prompt, int64_t unit) const;
  // Copies positions [0, m.n_reuse) of m's entry into cache (same shape as when saved) and
  // marks the entry as the most recently used.
  void restore(const Match& m, KvCache& cache);

  uint64_t bytes() const { return bytes_; }
  uint64_t budget() const { return budget_; }
  size_t entries() const { return entries_.size(); }
  uint64_t evictions() const { return evictions_; }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    int n_layer = 0;
    int64_t kv_dim = 0;
    std::vector<fp16_t> k;  // [n_layer, n, kv_dim]
    std::vector<fp16_t> v;  // [n_layer, kv_dim, n]
    uint64_t bytes() const { return (k.size() + v.size()) * sizeof(fp16_t); }
  };
  std::list<Entry> entries_;  // most recently used first
  uint64_t budget_ = 0, bytes_ = 0, evictions_ = 0;
};

}  // namespace hc
