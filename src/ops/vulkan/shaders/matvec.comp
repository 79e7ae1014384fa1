#version 450
// matvec_<type> (vk_abi.h MatvecPC): for output row j < n_rows and token t < n_tok (<= 8):
//   dot(t, j) = W[row(j)] . xq[t], row(j) = idx ? idx[j] : j, W of type WTYPE; xq[t] the
//               activations already quantised to the host's vec_dot_type (quantize.comp), nbx
//               bytes apart; the block arithmetic of vecdot.glsl (the host's vec_dot)
//   mode 0: y[t * ldy + j] = dot
//   mode 1: rows no token fires get y = 0 and are not read; others y = dot
//   mode 2: rows no token fires get y = 0 and are not read; else
//           y = fired(t, j) ? act(gate[t * ldy + j]) * dot : 0 (gate may alias y)
//   fired(t, j) = fire ? fire[t * ld_fire + j] != 0 : |act(gate[t * ldy + j])| > threshold.
//   bias (modes 0 / 1, may be 0): y = dot + bias[row(j)] for the rows computed (OPT's up bias);
//   mode 2 with glu_kind 3 (ungated ReLU, Falcon): no dot product, W is not read;
//           y = fired(t, j) ? relu(gate[t * ldy + j]) : 0.
//   mode 3 (an FFN's gate and up passes in one dispatch, gated kinds): g(t) = W[row(j)] . xq[t]
//           (+ bias[row(j)]), rows no token fires skipped when fire is set; then, for the rows
//           some token fires (fire, else |act(g)| > threshold), u(t) = W_up[row(j)] . xq[t] and
//           y = fired(t, j) ? act(g) * u : 0: exactly what mode 0 / 1 and then mode 2 leave in
//           y (the same dot products, sums and rounding), with W_up of W's type (same xq).
//   mode 4 (matmul_id): mode 0 on matrix e = idx[ld_fire] (clamped into [0, glu_kind)) of a
//           stack of matrices nb1_up bytes apart: W row j at w + e * nb1_up + j * nb1.
//
// Two work splits, chosen by the runtime with specialisation constant 0 (kVkRowsPerLane):
//
// ROWS_PER_LANE == 0, for GPUs ("rows" grid over n_rows): one workgroup (64 invocations) per
// output row. The invocations stride over the row's units (invocation i takes units i,
// i + 64, ...: neighbouring invocations read neighbouring blocks) and accumulate n_tok fp32 sums
// of unit dot products. The 64 partial sums of each token go to shared memory; after one
// barrier, invocation t adds those of token t in order and writes y for token t. Each
// invocation decides "fired" for itself (the same reads, so the decision is uniform) and keeps
// the gate values it read, so a gate aliasing y is read by every invocation before any writes y
// (the barrier between).
//
// ROWS_PER_LANE == R > 0, for CPU implementations (lavapipe; "rows" grid over
// ceil(n_rows / (L R)) workgroups of L = specialisation constant 1 invocations): invocation i of
// workgroup g owns rows g L R + i + L r, r < R, whole: it walks the units in order, loads the
// unit of its R rows, then each token's activation unit once for all R rows, and sums the unit
// dot products in fp32. No shared memory and no barrier: lavapipe runs a workgroup's invocations
// as SIMD lanes, and a barrier (a coroutine switch per lane group) cost it far more than the
// arithmetic of a row. Each invocation reads and writes only its own rows, so a gate aliasing y
// is safe.
//
// Token loops run to the constant MAX_TOK with a uniform `if (t < n_tok)`, so compilers unroll
// them and keep the per-token arrays in registers.
#include "common.glsl"
#include "vecdot.glsl"

layout(local_size_x = 64, local_size_x_id = 1, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 0) const int ROWS_PER_LANE = 0;
// Specialisation constant 2: the most tokens one dispatch takes (1 for the one-token pipelines,
// whose loops then compile to one iteration; HC_MAX_TOK for the others).
layout(constant_id = 2) const int MAX_TOK = HC_MAX_TOK;

layout(push_constant) uniform PC {
  uint64_t w, idx, x, y, fire, gate;
  int64_t nb1, nbx;
  int ne0, n_rows, n_tok, ldy, ld_fire, mode, glu_kind;
  float threshold;
  uint64_t bias;
  uint64_t w_up;  // mode 3
  int64_t nb1_up;
} pc;

// Whether token t fires row j given its gate value g (mode 3).
bool fires_g(uint j, int t, float g) {
  if (pc.fire != 0ul) return ld8(pc.fire + uint64_t(int64_t(t) * pc.ld_fire + int64_t(j))) != 0u;
  return abs(hc_act(g, pc.glu_kind)) > pc.threshold;
}

// Whether some token fires row j (always, in mode 0); which ones (fired[t]); their gate values
// (mode 2, or mode 1 with a threshold).
// Mode 3 asks as its gate pass would: always without fire (mode 0), by fire with it (mode 1).
bool row_fires(uint j, int n_tok, out bool fired[HC_MAX_TOK], out float g[HC_MAX_TOK]) {
  const int mode = pc.mode == 3 ? (pc.fire != 0ul ? 1 : 0) : pc.mode == 4 ? 0 : pc.mode;
  bool any = mode == 0;
  for (int t = 0; t < MAX_TOK; ++t) {
    fired[t] = false;
    g[t] = 0.0;
    if (mode != 0 && t < n_tok) {
      const int64_t yi = int64_t(t) * pc.ldy + int64_t(j);
      if (pc.gate != 0ul && (mode == 2 || pc.fire == 0ul)) {
        g[t] = FloatRef(pc.gate + off4(yi)).v[0];
      }
      if (pc.fire != 0ul) {
        fired[t] = ld8(pc.fire + uint64_t(int64_t(t) * pc.ld_fire + int64_t(j))) != 0u;
      } else {
        fired[t] = abs(hc_act(g[t], pc.glu_kind)) > pc.threshold;
      }
      any = any || fired[t];
    }
  }
  return any;
}

uint64_t weight_row(uint j) {
  if (pc.mode == 4) {
    const int e = clamp(IntRef(pc.idx).v[pc.ld_fire], 0, max(pc.glu_kind - 1, 0));
    return pc.w + uint64_t(int64_t(e) * pc.nb1_up + int64_t(j) * pc.nb1);
  }
  const int64_t row = pc.idx != 0ul ? int64_t(IntRef(pc.idx).v[j]) : int64_t(j);
  return pc.w + uint64_t(row * pc.nb1);
}

uint64_t up_row(uint j) {
  const int64_t row = pc.idx != 0ul ? int64_t(IntRef(pc.idx).v[j]) : int64_t(j);
  return pc.w_up + uint64_t(row * pc.nb1_up);
}

// Mode 3: g as the gate pass stores it (dot + bias).
float gate_value(uint j, float dot) {
  if (pc.bias == 0ul) return dot;
  const int64_t row = pc.idx != 0ul ? int64_t(IntRef(pc.idx).v[j]) : int64_t(j);
  return dot + FloatRef(pc.bias + off4(row)).v[0];
}

// y for token t of row j from its dot product (plus the gate's bias in modes 0 / 1).
void store_y(uint j, int t, float dot, bool fired, float g) {
  float v = dot;
  if (pc.mode < 2 && pc.bias != 0ul) {
    const int64_t row = pc.idx != 0ul ? int64_t(IntRef(pc.idx).v[j]) : int64_t(j);
    v = dot + FloatRef(pc.bias + off4(row)).v[0];
  }
  if (pc.mode == 2 || pc.mode == 3) v = fired ? hc_glu(g, dot, pc.glu_kind) : 0.0;
  FloatRef(pc.y + off4(int64_t(t) * pc.ldy + int64_t(j))).v[0] = v;
}

// ---- GPU: one workgroup per row ------------------------------------------------------------

// Per-token partial sums, 2 KiB; rows padded to 65 floats so that the 8 invocations summing
// them (one token each) read 8 different banks.
shared float red[HC_MAX_TOK][HC_LOCAL + 1];

void main_row_per_group() {
  const uint j = hc_row_index();
  if (j >= uint(pc.n_rows)) return;
  const uint lid = gl_LocalInvocationID.x;
  const int n_tok = min(pc.n_tok, min(MAX_TOK, HC_MAX_TOK));
  bool fired[HC_MAX_TOK];
  float g[HC_MAX_TOK];
  const bool fires = row_fires(j, n_tok, fired, g);
  if (fires && pc.mode == 2 && pc.glu_kind == 3) {  // uniform: y from the gate alone
    barrier();  // every invocation has read the gate (which y may alias)
    if (lid == 0u) {
      for (int t = 0; t < MAX_TOK; ++t) {
        if (t < n_tok) store_y(j, t, 0.0, fired[t], g[t]);
      }
    }
    return;
  }
  if (!fires) {  // uniform: no token fires row j, which is not read
    if (lid == 0u) {
      for (int t = 0; t < MAX_TOK; ++t) {
        if (t < n_tok) FloatRef(pc.y + off4(int64_t(t) * pc.ldy + int64_t(j))).v[0] = 0.0;
      }
    }
    return;
  }
  const uint64_t wrow = weight_row(j);
  const int ne0 = pc.ne0, n_units = vd_units(ne0);
  float acc[HC_MAX_TOK];
  for (int t = 0; t < MAX_TOK; ++t) acc[t] = 0.0;
  for (int u = int(lid); u < n_units; u += HC_LOCAL) {
    const VD_WB wb = vd_load_w(wrow, u, ne0);
    for (int t = 0; t < MAX_TOK; ++t) {
      if (t < n_tok) acc[t] += vd_dot(wb, vd_load_x(pc.x + uint64_t(t * pc.nbx), u, ne0));
    }
  }
  // Every invocation stores its partial sums; after one barrier invocation t sums the 64 of
  // token t in order and writes y for token t.
  for (int t = 0; t < MAX_TOK; ++t) {
    if (t < n_tok) red[t][lid] = acc[t];
  }
  barrier();
  if (pc.mode == 3) {
    // Every invocation sums every token's partials (the order invocation t uses), so all hold
    // g and agree on which tokens fire; then the up row as a mode 2 pass would.
    bool up_any = false;
    for (int t = 0; t < MAX_TOK; ++t) {
      if (t < n_tok) {
        float dot = 0.0;
        for (int i = 0; i < HC_LOCAL; ++i) dot += red[t][i];
        g[t] = gate_value(j, dot);
        fired[t] = fires_g(j, t, g[t]);
        up_any = up_any || fired[t];
      }
    }
    barrier();  // red is read by all before it is written again
    if (!up_any) {  // uniform
      if (lid == 0u) {
        for (int t = 0; t < MAX_TOK; ++t) {
          if (t < n_tok) FloatRef(pc.y + off4(int64_t(t) * pc.ldy + int64_t(j))).v[0] = 0.0;
        }
      }
      return;
    }
    const uint64_t urow = up_row(j);
    for (int t = 0; t < MAX_TOK; ++t) acc[t] = 0.0;
    for (int u = int(lid); u < n_units; u += HC_LOCAL) {
      const VD_WB wb = vd_load_w(urow, u, ne0);
      for (int t = 0; t < MAX_TOK; ++t) {
        if (t < n_tok) acc[t] += vd_dot(wb, vd_load_x(pc.x + uint64_t(t * pc.nbx), u, ne0));
      }
    }
    for (int t = 0; t < MAX_TOK; ++t) {
      if (t < n_tok) red[t][lid] = acc[t];
    }
    barrier();
  }
  for (int t = 0; t < MAX_TOK; ++t) {
    if (t < n_tok && uint(t) == lid) {
      float dot = 0.0;
      for (int i = 0; i < HC_LOCAL; ++i) dot += red[t][i];
      store_y(j, t, dot, fired[t], g[t]);
    }
  }
}

// ---- CPU: whole rows per invocation ----------------------------------------------------------

#define MAX_R 4  // the largest ROWS_PER_LANE the runtime may ask for (vk_abi.h kVkMaxRowsPerLane)

// acc[r][t] += the unit dot products of rows wrow[r] (live ones) with token t, units in order.
void rows_dots(uint64_t wrow[MAX_R], bool live[MAX_R], int n_tok, int n_units, int ne0,
               inout float acc[MAX_R][HC_MAX_TOK]) {
  for (int u = 0; u < n_units; ++u) {
    VD_WB wb[MAX_R];
    for (int r = 0; r < MAX_R; ++r) {
      if (live[r]) wb[r] = vd_load_w(wrow[r], u, ne0);
    }
    for (int t = 0; t < MAX_TOK; ++t) {
      if (t < n_tok) {
        const VD_XB xb = vd_load_x(pc.x + uint64_t(t * pc.nbx), u, ne0);
        for (int r = 0; r < MAX_R; ++r) {
          if (live[r]) acc[r][t] += vd_dot(wb[r], xb);
        }
      }
    }
  }
}

void main_rows_per_lane() {
  const int R = min(ROWS_PER_LANE, MAX_R);
  const uint L = gl_WorkGroupSize.x;
  const uint base = hc_row_index() * L * uint(R) + gl_LocalInvocationID.x;
  const int n_tok = min(pc.n_tok, min(MAX_TOK, HC_MAX_TOK));
  const int ne0 = pc.ne0, n_units = vd_units(ne0);
  bool live[MAX_R];
  bool fired[MAX_R][HC_MAX_TOK];
  float g[MAX_R][HC_MAX_TOK];
  uint64_t wrow[MAX_R];
  float acc[MAX_R][HC_MAX_TOK];
  bool any = false;
  for (int r = 0; r < MAX_R; ++r) {
    const uint j = base + L * uint(r);
    live[r] = r < R && j < uint(pc.n_rows) && row_fires(j, n_tok, fired[r], g[r]) &&
              !(pc.mode == 2 && pc.glu_kind == 3);  // ungated: no dot product (store_y)
    wrow[r] = live[r] ? weight_row(j) : 0ul;
    any = any || live[r];
    for (int t = 0; t < MAX_TOK; ++t) acc[r][t] = 0.0;
  }
  if (any) rows_dots(wrow, live, n_tok, n_units, ne0, acc);
  if (pc.mode == 3) {  // g from the gate dots, which tokens fire, then the up dots
    any = false;
    for (int r = 0; r < MAX_R; ++r) {
      const uint j = base + L * uint(r);
      const bool in_range = r < R && j < uint(pc.n_rows);
      bool up = false;
      for (int t = 0; t < MAX_TOK; ++t) {
        g[r][t] = in_range && live[r] ? gate_value(j, acc[r][t]) : 0.0;
        fired[r][t] = in_range && t < n_tok && fires_g(j, t, g[r][t]);
        up = up || fired[r][t];
        acc[r][t] = 0.0;
      }
      live[r] = up;
      wrow[r] = up ? up_row(j) : 0ul;
      any = any || up;
    }
    if (any) rows_dots(wrow, live, n_tok, n_units, ne0, acc);
  }
  for (int r = 0; r < MAX_R; ++r) {
    const uint j = base + L * uint(r);
    if (r < R && j < uint(pc.n_rows)) {
      for (int t = 0; t < MAX_TOK; ++t) {
        if (t < n_tok) store_y(j, t, live[r] ? acc[r][t] : 0.0, fired[r][t], g[r][t]);
      }
    }
  }
}

void main() {
  if (ROWS_PER_LANE > 0) {
    main_rows_per_lane();
  } else {
    main_row_per_group();
  }
}
