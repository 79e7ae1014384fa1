#version 450
// down_<type> (vk_abi.h DownPC): the down projection over the transposed matrix Dt [rows, n_out]
// of type WTYPE, row(j) = idx ? idx[j] : j:
//   out[t * n_out + c] = sum over j < n_rows, in order, of h[t * n_rows + j] * Dt[row(j)][c]
// for t < n_tok (<= 8), skipping the j whose h is 0 for every token (their rows are not read);
// out is overwritten. The host's sparse_down arithmetic: per output, acc = fma(h_j, w, acc) from
// 0 in index order, w dequantised exactly as quant::dequantize_row_ref (dequant.glsl); h fp32.
//
// Two work splits, chosen by the runtime with specialisation constant 0 (COLS_PER_LANE):
//
// 0, for GPUs ("elements" grid over n_out columns, 64 per workgroup): invocation c owns output
// column c and keeps n_tok fp32 accumulators, so neighbouring invocations read neighbouring
// elements (bytes) of each Dt row. The workgroup walks the rows 64 at a time: each invocation
// loads one row's h values (all tokens), whether any is non-zero and its Dt row number into
// shared memory; then every invocation goes through the 64 in order, dequantising its column of
// the active rows (a uniform branch). Invocations past n_out take part in the staging and the
// barriers but read and write no column.
//
// 8, for CPU implementations ("elements" grid over ceil(n_out / 8) invocations, workgroups of
// specialisation constant 1): invocation g owns columns 8 g .. 8 g + 7 and walks every row
// itself, reading its h values and row number directly: no shared memory and no barrier (a
// barrier costs lavapipe a coroutine switch per lane group), and the per-row reads are shared
// by 8 columns dequantised together (dq_group).
#include "common.glsl"
#include "dequant.glsl"

layout(local_size_x = 64, local_size_x_id = 1, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 0) const int COLS_PER_LANE = 0;
// The most tokens one dispatch takes (1 for the one-token pipelines, HC_MAX_TOK otherwise).
layout(constant_id = 2) const int MAX_TOK = HC_MAX_TOK;

layout(push_constant) uniform PC {
  uint64_t dt, h, idx, out_;
  int64_t nb1;
  int n_out, n_rows, n_tok, pad;
} pc;

// ---- GPU: a column per invocation, rows staged 64 at a time -------------------------------

shared float hs[HC_LOCAL][HC_MAX_TOK];  // 2 KiB: h of the chunk's rows
shared int rows[HC_LOCAL];              // their Dt row numbers
shared uint live[HC_LOCAL];             // 1 when some token's h is non-zero

void main_column_per_lane() {
  const uint64_t ci = hc_element_index();
  const bool own = ci < uint64_t(pc.n_out);
  const int c = int(own ? ci : 0ul);
  const uint lid = gl_LocalInvocationID.x;
  const int n_tok = min(pc.n_tok, min(MAX_TOK, HC_MAX_TOK));
  const int n_rows = pc.n_rows;

  float acc[HC_MAX_TOK];
  for (int t = 0; t < MAX_TOK; ++t) acc[t] = 0.0;

  for (int j0 = 0; j0 < n_rows; j0 += HC_LOCAL) {
    // Stage rows j0 .. j0 + 63.
    const int j = j0 + int(lid);
    bool act = false;
    if (j < n_rows) {
      for (int t = 0; t < MAX_TOK; ++t) {
        float v = 0.0;
        if (t < n_tok) v = FloatRef(pc.h + off4(int64_t(t) * n_rows + j)).v[0];
        hs[lid][t] = v;
        act = act || v != 0.0;
      }
      rows[lid] = pc.idx != 0ul ? IntRef(pc.idx).v[j] : j;
    }
    live[lid] = act ? 1u : 0u;
    barrier();

    const int nc = min(HC_LOCAL, n_rows - j0);
    if (own) {
      for (int jj = 0; jj < nc; ++jj) {
        if (live[jj] == 0u) continue;
        const float wv = dq_elem(pc.dt + uint64_t(int64_t(rows[jj]) * pc.nb1), c);
        for (int t = 0; t < MAX_TOK; ++t) {
          if (t < n_tok) acc[t] = fma(hs[jj][t], wv, acc[t]);
        }
      }
    }
    barrier();  // the next chunk overwrites hs / rows / live
  }

  if (own) {
    for (int t = 0; t < MAX_TOK; ++t) {
      if (t < n_tok) FloatRef(pc.out_ + off4(int64_t(t) * pc.n_out + c)).v[0] = acc[t];
    }
  }
}

// ---- CPU: 8 columns per invocation, every row read directly --------------------------------

void main_group_per_lane() {
  const uint64_t gi = hc_row_index() * uint64_t(gl_WorkGroupSize.x) + gl_LocalInvocationID.x;
  const int n_out = pc.n_out;
  if (gi * uint64_t(DQ_GROUP) >= uint64_t(n_out)) return;
  const int k0 = int(gi) * DQ_GROUP;
  const int n_tok = min(pc.n_tok, min(MAX_TOK, HC_MAX_TOK));
  const int n_rows = pc.n_rows;
  float acc[HC_MAX_TOK][DQ_GROUP];
  for (int t = 0; t < MAX_TOK; ++t) {
    for (int e = 0; e < DQ_GROUP; ++e) acc[t][e] = 0.0;
  }
  for (int j = 0; j < n_rows; ++j) {
    float hv[HC_MAX_TOK];
    bool act = false;
    for (int t = 0; t < MAX_TOK; ++t) {
      hv[t] = t < n_tok ? FloatRef(pc.h + off4(int64_t(t) * n_rows + j)).v[0] : 0.0;
      act = act || hv[t] != 0.0;
    }
    if (!act) continue;
    const int row = pc.idx != 0ul ? IntRef(pc.idx).v[j] : j;
    float w[8];
    dq_group(pc.dt + uint64_t(int64_t(row) * pc.nb1), k0, n_out, w);
    for (int t = 0; t < MAX_TOK; ++t) {
      if (t < n_tok) {
        for (int e = 0; e < DQ_GROUP; ++e) acc[t][e] = fma(hv[t], w[e], acc[t][e]);
      }
    }
  }
  for (int t = 0; t < MAX_TOK; ++t) {
    if (t < n_tok) {
      for (int e = 0; e < DQ_GROUP; ++e) {
        if (k0 + e < n_out) FloatRef(pc.out_ + off4(int64_t(t) * n_out + k0 + e)).v[0] = acc[t][e];
      }
    }
  }
}

void main() {
  if (COLS_PER_LANE > 0) {
    main_group_per_lane();
  } else {
    main_column_per_lane();
  }
}
