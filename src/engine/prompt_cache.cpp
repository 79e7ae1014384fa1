#include "engine/prompt_cache.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"

namespace hc {

int64_t reuse_unit(int64_t n_batch, int64_t ubatch) {
  // Chunks of n_batch split into micro-batches of ubatch: a regular grid of ubatch only when
  // n_batch is a multiple of it; else whole chunks.
  return n_batch >= ubatch && n_batch % ubatch == 0 ? ubatch : n_batch;
}

int64_t reusable_prefix(std::span<const int32_t> cached, int64_t computed,
                        std::span<const int32_t> prompt, int64_t unit) {
  if (prompt.empty() || unit <= 0) return 0;
  const int64_t limit =
      std::min({static_cast<int64_t>(cached.size()), computed,
                static_cast<int64_t>(prompt.size()) - 1});
  int64_t n = 0;
  while (n < limit && cached[static_cast<size_t>(n)] == prompt[static_cast<size_t>(n)]) ++n;
  return n / unit * unit;
}

void PromptCache::save(std::span<const int32_t> tokens, const KvCache& cache) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0 || budget_ == 0) return;
  HC_CHECK(n <= cache.n_ctx);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const bool holds_them = it->tokens.size() >= tokens.size() &&
                            std::equal(tokens.begin(), tokens.end(), it->tokens.begin());
    if (holds_them) {
      entries_.splice(entries_.begin(), entries_, it);
      return;
    }
  }
  Entry e;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.n_layer = cache.n_layer;
  e.kv_dim = cache.kv_dim;
  if (e.n_layer * 2 * n * e.kv_dim * static_cast<int64_t>(sizeof(fp16_t)) >
      static_cast<int64_t>(budget_))
    return;
  // Entries that are prefixes of the new one: it replaces them.
  for (auto it = entries_.begin(); it != entries_.end();) {
    const bool prefix = it->tokens.size() <= tokens.size() &&
                        std::equal(it->tokens.begin(), it->tokens.end(), tokens.begin());
    if (prefix) {
      bytes_ -= it->bytes();
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  e.k.resize(static_cast<size_t>(e.n_layer * n * e.kv_dim));
  e.v.resize(e.k.size());
  for (int il = 0; il < e.n_layer; ++il) {
    std::memcpy(e.k.data() + il * n * e.kv_dim, cache.k_at(il, 0),
                static_cast<size_t>(n * e.kv_dim) * sizeof(fp16_t));
    for (int64_t d = 0; d < e.kv_dim; ++d)
      std::memcpy(e.v.data() + (il * e.kv_dim + d) * n, cache.v_row(il, d),
                  static_cast<size_t>(n) * sizeof(fp16_t));
  }
  const uint64_t add = e.bytes();
  while (!entries_.empty() && bytes_ + add > budget_) {
    bytes_ -= entries_.back().bytes();
    entries_.pop_back();
    ++evictions_;
  }
  bytes_ += add;
  entries_.push_front(std::move(e));
}

PromptCache::Match PromptCache::best(std::span<const int32_t> prompt, int64_t unit) const {
  Match m;
  for (const Entry& e : entries_) {
    const int64_t n = reusable_prefix(e.tokens, static_cast<int64_t>(e.tokens.size()), prompt, unit);
    if (n > m.n_reuse) m = {n, &e};
  }
  return m;
}

void PromptCache::restore(const Match& m, KvCache& cache) {
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const Entry& e) { return &e == m.entry; });
  HC_CHECK(it != entries_.end() && m.n_reuse <= static_cast<int64_t>(it->tokens.size()));
  HC_CHECK(it->n_layer == cache.n_layer && it->kv_dim == cache.kv_dim && m.n_reuse <= cache.n_ctx);
  const int64_t n = static_cast<int64_t>(it->tokens.size()), kv = it->kv_dim;
  for (int il = 0; il < it->n_layer; ++il) {
    std::memcpy(cache.k_at(il, 0), it->k.data() + il * n * kv,
                static_cast<size_t>(m.n_reuse * kv) * sizeof(fp16_t));
    for (int64_t d = 0; d < kv; ++d)
      std::memcpy(cache.v_row(il, d), it->v.data() + (il * kv + d) * n,
                  static_cast<size_t>(m.n_reuse) * sizeof(fp16_t));
  }
  entries_.splice(entries_.begin(), entries_, it);
}

}  // namespace hc
