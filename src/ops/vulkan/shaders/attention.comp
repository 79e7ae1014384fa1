#version 450
// attention (vk_abi.h AttentionPC; grid (n_head, n_tok, 1)): causal grouped-query attention over
// the fp16 KV cache, one workgroup per query head h = WorkGroupID.x and token t = WorkGroupID.y:
//   k_cache   [n_ctx, k_stride] fp16, KV head hk at offset hk * head_dim of a position's row
//   v_cache_t [n_head_kv * head_dim, v_stride] fp16, row hk * head_dim + d = dim d over positions
// with hk = h / (n_head / n_head_kv); token t sees positions j < n_kv = pos0 + t + 1.
//
// The host's arithmetic (ops/cpu/attention.cpp, ggml's):
//   q rounded to fp16; s_j = (q . k_j) * scale, the dot an fp32 sum of exact fp16 products;
//   m = max s_j; e_j = exp(s_j - m) (hc_exp, ~1 ulp, as ggml's expf);
//   S = sum e_j taken as the host does: float sums of 16 consecutive positions in ggml's
//       reduce_add_16 order, those added exactly (a float-float here, a double there);
//   p_j = fp16(e_j * inv), inv = 1 / S rounded to float: the weights are rounded to fp16, as
//       ggml's kqv product takes them;
//   out_d = sum p_j v_dj, an fp32 sum of exact fp16 products.
// Only the order of the fp32 dot-product sums differs from the host (and exp by an ulp).
//
// Three passes over the positions, 64 at a time (invocation i takes position j0 + i): the
// maximum; the sum; the weights, then each invocation owns output dims i, i + 64, ... (up to 8:
// head_dim <= 512) and reads their V rows over the chunk. Scores are recomputed in each pass
// rather than kept (their number is only bounded by the context). Shared memory: 2.5 KiB.
#include "common.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(push_constant) uniform PC {
  uint64_t q, k_cache, v_cache_t, out_, pos_at;
  int64_t k_stride, v_stride;
  int pos0, n_tok, n_head, n_head_kv, head_dim;
  float scale;
} pc;

#define CHUNK HC_LOCAL                       // cache positions per step
#define DIMS (HC_MAX_HEAD_DIM / HC_LOCAL)    // output dims per invocation

shared float qs[HC_MAX_HEAD_DIM];  // this head's q, rounded to fp16
shared float ps[CHUNK];            // the chunk's scores, then e_j, then p_j
shared float bc;                   // a value invocation 0 hands to all (the maximum, 1 / S)

// The two halves of a 32-bit word, as floats (low half first in memory).
float h_lo(uint v) { return hc_half(v & 0xffffu); }
float h_hi(uint v) { return hc_half(v >> 16); }

uint64_t kbase, krow_bytes;
bool kvec;
int hd;

// s_j for position j.
float score(int j) {
  const uint64_t kr = kbase + uint64_t(j) * krow_bytes;
  float s = 0.0;
  if (kvec) {
    for (int d = 0; d < hd; d += 8) {
      const uvec4 kv = UVec4Ref(kr + uint64_t(d) * 2ul).v[0];
      s = fma(qs[d + 0], h_lo(kv.x), s);
      s = fma(qs[d + 1], h_hi(kv.x), s);
      s = fma(qs[d + 2], h_lo(kv.y), s);
      s = fma(qs[d + 3], h_hi(kv.y), s);
      s = fma(qs[d + 4], h_lo(kv.z), s);
      s = fma(qs[d + 5], h_hi(kv.z), s);
      s = fma(qs[d + 6], h_lo(kv.w), s);
      s = fma(qs[d + 7], h_hi(kv.w), s);
    }
  } else {
    for (int d = 0; d < hd; ++d) s = fma(qs[d], hc_half(ld16(kr + uint64_t(d) * 2ul)), s);
  }
  return s * pc.scale;
}

// ggml's reduce_add_16 of ps[o .. o + 15]: 16 -> 8 (hi + lo), 8 -> 4, then (0 + 2) + (1 + 3).
float reduce16(int o) {
  float t8[8], t4[4];
  for (int i = 0; i < 8; ++i) t8[i] = ps[o + i + 8] + ps[o + i];
  for (int i = 0; i < 4; ++i) t4[i] = t8[i + 4] + t8[i];
  return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

void main() {
  const int h = int(gl_WorkGroupID.x), t = int(gl_WorkGroupID.y);
  if (h >= pc.n_head || t >= pc.n_tok) return;
  const int lid = int(gl_LocalInvocationID.x);
  hd = min(pc.head_dim, HC_MAX_HEAD_DIM);
  const int hk = h / (pc.n_head / pc.n_head_kv);

  const uint64_t qrow = pc.q + off4((int64_t(t) * pc.n_head + h) * pc.head_dim);
  for (int d = lid; d < hd; d += HC_LOCAL) qs[d] = hc_round_half(FloatRef(qrow).v[d]);
  barrier();

  kbase = pc.k_cache + uint64_t(int64_t(hk) * pc.head_dim) * 2ul;
  krow_bytes = uint64_t(pc.k_stride) * 2ul;
  const uint64_t vbase = pc.v_cache_t + uint64_t(int64_t(hk) * pc.head_dim * pc.v_stride) * 2ul;
  const uint64_t vrow_bytes = uint64_t(pc.v_stride) * 2ul;
  // 16-byte loads when every key row (resp. V row) starts 16-byte aligned.
  kvec = ((kbase | krow_bytes) & 15ul) == 0ul && (hd & 7) == 0;
  const bool vvec = ((vbase | vrow_bytes) & 15ul) == 0ul;
  // (A device position past the cache reads the whole cache, no further.)
  const int n_kv = int(min(int64_t(hc_pos(pc.pos_at, pc.pos0)) + t + 1, pc.v_stride));

  // Pass 1: m = max s_j (each invocation over its own positions, then invocation 0 over theirs:
  // reductions and sums run in invocation 0 alone, because on lavapipe every shared-memory read
  // of every invocation is a load loop over the SIMD lanes).
  float m = uintBitsToFloat(0xff800000u);  // -inf
  for (int j = lid; j < n_kv; j += CHUNK) m = max(m, score(j));
  ps[lid] = m;
  barrier();
  if (lid == 0) {
    for (int i = 1; i < CHUNK; ++i) m = max(m, ps[i]);
    bc = m;
  }
  barrier();
  m = bc;

  // Pass 2: S in the host's order, as a float-float, in invocation 0.
  float s_hi = 0.0, s_lo = 0.0;
  for (int j0 = 0; j0 < n_kv; j0 += CHUNK) {
    const int j = j0 + lid;
    ps[lid] = j < n_kv ? hc_exp(score(j) - m) : 0.0;
    barrier();
    if (lid == 0) {
      for (int o = 0; o < CHUNK && j0 + o < n_kv; o += 16) {
        float e;
        hc_two_sum(s_hi, reduce16(o), s_hi, e);
        s_lo += e;
      }
    }
    barrier();
  }
  if (lid == 0) {
    hc_two_sum(s_hi, s_lo, s_hi, s_lo);
    bc = hc_recip_ff(s_hi, s_lo);
  }
  barrier();
  const float inv = bc;

  // Pass 3: p_j = fp16(e_j * inv); out_d = sum p_j v_dj.
  float acc[DIMS];
  for (int i = 0; i < DIMS; ++i) acc[i] = 0.0;
  for (int j0 = 0; j0 < n_kv; j0 += CHUNK) {
    const int nc = min(CHUNK, n_kv - j0);
    if (lid < nc) {
      precise float p = hc_exp(score(j0 + lid) - m) * inv;
      ps[lid] = hc_round_half(p);
    }
    barrier();
    for (int i = 0; i < DIMS; ++i) {  // constant trip count: acc stays in registers
      const int d = lid + i * HC_LOCAL;
      if (d < hd) {
        const uint64_t vr = vbase + uint64_t(d) * vrow_bytes + uint64_t(j0) * 2ul;
        float s = acc[i];
        int jj = 0;
        if (vvec) {  // j0 is a multiple of 64: vr is 16-byte aligned
          for (; jj + 8 <= nc; jj += 8) {
            const uvec4 vv = UVec4Ref(vr + uint64_t(jj) * 2ul).v[0];
            s = fma(ps[jj + 0], h_lo(vv.x), s);
            s = fma(ps[jj + 1], h_hi(vv.x), s);
            s = fma(ps[jj + 2], h_lo(vv.y), s);
            s = fma(ps[jj + 3], h_hi(vv.y), s);
            s = fma(ps[jj + 4], h_lo(vv.z), s);
            s = fma(ps[jj + 5], h_hi(vv.z), s);
            s = fma(ps[jj + 6], h_lo(vv.w), s);
            s = fma(ps[jj + 7], h_hi(vv.w), s);
          }
        }
        for (; jj < nc; ++jj) s = fma(ps[jj], hc_half(ld16(vr + uint64_t(jj) * 2ul)), s);
        acc[i] = s;
      }
    }
    barrier();  // the next chunk overwrites ps
  }

  const uint64_t orow = pc.out_ + off4((int64_t(t) * pc.n_head + h) * pc.head_dim);
  for (int i = 0; i < DIMS; ++i) {
    const int d = lid + i * HC_LOCAL;
    if (d < hd) FloatRef(orow).v[d] = acc[i];
  }
}
