// Projection of decode tokens/s for large models on named hardware (docs/SIMULATE.md): a pure
// performance model, no engine. It reuses the placement planner's cost model (sparse/planner.h:
// PlanInput, predict_plan, plan_greedy / plan_best) for the hot/cold modes and adds what that
// model lacks: whole-layer dense offload (llama.cpp's -ngl), the output matrix on the device,
// the host's dense gate in layers without device neurons, the migration of neurons over the
// link when the serving distribution drifts from the profile, and the efficiencies (achieved
// over peak bandwidth) that turn catalog figures into achieved ones.
//
// Inputs:
//   ModelBytes    byte sizes of every layer as the engine stores them: from a shape of the
//                 catalog (llama2-7b/13b/70b, llama-33b; MoE: qwen3-30b-a3b, mixtral-8x7b,
//                 turbosparse-mixtral) and a weight type, or from a real dense GGUF (the app
//                 fills it from the loaded model).
//   HardwareSpec  host peak bandwidth x read fraction, device memory / bandwidth x efficiency,
//                 link, per-operation and round-trip costs (catalog: rtx4090, a100-80g,
//                 a100-40g; "host" = this machine and its CPU device, from a calibration).
//   HostEfficiency  the engine's dense decode GB/s over the read probe, and its sparse-row
//                 kernels' GB/s over the dense decode's, by firing share (measured here).
//   firing        per layer p_i = P(neuron i fires) on the profiling distribution: a power law
//                 fitted to published statistics, or a measured statistics file resampled to
//                 the target n_ff by rank quantile. MoE: p_e = the share of tokens routed to
//                 expert e (expert_routing_probs, routing_from_counts).
//
// MoE shapes (ModelShape::n_expert > 0: Qwen3-30B-A3B, Mixtral-8x7B, TurboSparse-Mixtral) place
// whole experts: the planner's unit is an expert (moe_plan_input), its "firing probability" the
// share of tokens the router sends to it (the profile is [n_layer][n_expert], summing to
// n_expert_used per layer). Their modes: dense-cpu, sparse-cpu (experts with sparse neurons
// only), dense-offload, llamacpp-cpu-moe (llama.cpp's -ngl 99 --n-cpu-moe N: everything but the
// experts on the device, the experts of the first N layers on the host), hot-experts (static
// placement of the most routed experts) and dynamic (as below, moving whole experts).
//
// Modes (ModeResult::mode):
//   dense-cpu      every weight read on the host
//   sparse-cpu     the activation-sparse FFN on the host only (the planner's empty plan)
//   dense-offload  the last N whole layers (weights + KV) on the device, N as many as fit or
//                  given; host and device run one after the other; the output matrix too when
//                  every layer and it fit
//   static         hot/cold placement planned on the profiling distribution, run on the serving
//                  one (the profile with a share `drift` of its neurons' ranks permuted)
//   dynamic        placement planned on the serving distribution, or the static plan's per-layer
//                  capacities refilled with the serving top-k when that is faster (so it is
//                  never slower than static before migration), plus the migration term: bytes
//                  newly placed on the device / drift_period_tokens over the link, per token
// The planner charges a hybrid layer's cold gate rows at the row kernels' rate (as the executor
// reads them); a layer without device neurons runs its gate dense. Layers where the hybrid FFN
// comes out slower than the host alone are taken out of the plan and the planner re-run.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "sparse/placement_plan.h"
#include "sparse/planner.h"

namespace hc::sparse {

// ---- model shapes -------------------------------------------------------------------------

struct ModelShape {
  std::string name;
  int n_layer = 0;
  int64_t n_embd = 0, n_ff = 0;  // MoE: n_ff is one expert's FFN width
  int n_head = 0, n_head_kv = 0;
  int64_t n_vocab = 0;
  std::string source;  // where the figures come from
  int64_t n_embd_head = 0;     // head size when not n_embd / n_head (Qwen3: 128, not 2048 / 32)
  bool qk_norm = false;        // per-head RMS norms of q and k (Qwen3): 2 x head_dim F32 per layer
  int n_expert = 0;            // MoE: experts per layer (0: a dense FFN)
  int n_expert_used = 0;       // MoE: experts the router picks per token
  double expert_sparsity = 0;  // share of a routed expert's neurons not firing (0: dense)
  int64_t expert_predictor_rank = 0;  // each expert's low-rank neuron predictor (F16), 0: none
  int64_t head_dim() const {
    return n_embd_head > 0 ? n_embd_head : (n_head > 0 ? n_embd / n_head : 0);
  }
  bool moe() const { return n_expert > 0; }
};

// llama2-7b, llama2-13b, llama-33b, llama2-70b, and the MoE shapes qwen3-30b-a3b, mixtral-8x7b,
// turbosparse-mixtral (docs/SIMULATE.md cites each).
const std::vector<ModelShape>& shape_catalog();
// By name; "7b", "13b", "33b", "70b", "qwen3-moe", "mixtral", "turbosparse" are accepted too.
// Errors name the accepted names.
Result<ModelShape> find_shape(const std::string& name);

// ---- byte sizes ---------------------------------------------------------------------------

struct LayerBytes {
  uint64_t attn = 0;       // attn_norm + wq + wk + wv + wo as stored
  uint64_t ffn_dense = 0;  // ffn_norm + gate + up + down as stored (what a dense FFN reads)
  uint64_t gate_row = 0;   // one neuron's gate row
  uint64_t up_row = 0;     // one neuron's up row
  uint64_t down_t_row = 0; // one neuron's row of the transposed down matrix (sparse layout)
  // MoE: the rows above are one expert's, and ffn_dense is the FFN as stored: ffn_norm + router
  // + every expert.
  uint64_t router = 0;            // ffn_gate_inp, F32 [n_expert, n_embd]
  uint64_t expert = 0;            // one expert's gate + up + down as stored (a dense read of it)
  uint64_t expert_predictor = 0;  // one expert's neuron predictor, fc1 + fc2 (F16); 0: none
  uint64_t neuron() const { return gate_row + up_row + down_t_row; }
};

struct ModelBytes {
  std::string name;  // shape name or file
  std::string type;  // weight type name ("q4_0", or "file" for a real model's mix)
  int64_t n_embd = 0, n_ff = 0, n_vocab = 0;  // MoE: n_ff is one expert's width
  int n_expert = 0, n_expert_used = 0;        // MoE (0: dense FFN)
  std::vector<LayerBytes> layers;
  uint64_t kv_bytes_per_pos = 0;  // K and V of one layer for one position (fp16)
  uint64_t output = 0;            // output norm + output matrix
  int n_layer() const { return static_cast<int>(layers.size()); }
  bool moe() const { return n_expert > 0; }
  // The planner's placement units per layer: neurons, or experts for MoE.
  int64_t n_units() const { return moe() ? n_expert : n_ff; }
  // What one token reads of layer l's FFN when run dense: all of it, or (MoE) the norm, the
  // router and n_expert_used whole experts.
  uint64_t ffn_read(int l) const;
  // Weights (no KV, no predictors): every layer's attention and stored FFN plus the output.
  uint64_t weight_bytes() const;
};

// The sparse FFN's transposed down matrix type for a down matrix of type t: F32 / F16 / BF16
// keep theirs, block types become Q8_0 (mirrors ops::down_t_type; hc_sparse cannot link ops).
GgmlType down_t_type_of(GgmlType t);
// Bytes per weight of a type (block bytes / block size): f16 2, q8_0 1.0625, q4_0 0.5625, ...
double bytes_per_weight(GgmlType t);
// A shape's bytes with every matrix (output and experts included) of type t, norms and the MoE
// router F32, expert predictors F16. Errors when t has no known block size or a row length is
// not a multiple of it.
Result<ModelBytes> model_bytes(const ModelShape& shape, GgmlType t);

// ---- firing statistics --------------------------------------------------------------------

// Published statistics the power law is fitted to (docs/SIMULATE.md, "Firing statistics").
// PowerInfer (Song et al., SOSP '24, section 3.1): in a single MLP block of LLaMA2(ReGLU)-70B,
// 43% of the neurons account for 80% of the activations.
constexpr double kReluLlamaCoverShare = 0.43;
constexpr double kReluLlamaCoverMass = 0.80;
// PowerInfer's footnote 3: "only about 10% of its neurons are activated" per iteration.
constexpr double kPowerInferFiringShare = 0.10;

// p(rank r of n) = min(1, c * x^-a), x = (r + 0.5) / n: most frequent first.
struct PowerLaw {
  double a = 0;  // exponent (0: uniform)
  double c = 0;  // scale
};
// The power law whose mean p is firing_share and whose most frequent cover_share of the n
// neurons carry cover_mass of the firings (as neurons_covering measures it). Errors when the
// targets cannot be met (cover_share must lie in (cover_mass * firing_share, cover_mass]).
Result<PowerLaw> fit_power_law(int64_t n, double firing_share, double cover_share,
                               double cover_mass = kReluLlamaCoverMass);
// [n] p by rank (descending).
std::vector<double> power_law_probs(const PowerLaw& pl, int64_t n);

// MoE routing without statistics (docs/SIMULATE.md, "Routing skew"): every layer's experts by
// rank follow p(x) = min(1, c x^-skew), x = (rank + 0.5) / n_expert, c such that the p sum to
// n_expert_used (each token routes to that many distinct experts). skew 0: uniform,
// n_expert_used / n_expert each. Errors unless 0 < n_expert_used < n_expert and skew in [0, 20].
Result<std::vector<double>> expert_routing_probs(int n_expert, int n_expert_used, double skew);
// Routing from measured counts: counts[l][e] tokens routed to expert e of source layer l over
// n_tokens tokens (hotcold profile's expert_count). The same shape: count / n_tokens as is.
// Another: resampled as rescale_firing does (layers by position, experts by rank quantile),
// then each layer scaled to sum to n_expert_used, no p above 1. Errors on empty or ragged
// counts, counts above n_tokens, or a layer with no routings.
Result<std::vector<std::vector<double>>> routing_from_counts(
    const std::vector<std::vector<double>>& counts, uint64_t n_tokens, int n_layer, int n_expert,
    int n_expert_used);
// The default skew (an assumption, docs/SIMULATE.md "Routing skew").
constexpr double kDefaultExpertSkew = 0.3;

// Mean of p (the share of neurons firing per token).
double mean_firing(const std::vector<double>& p);
// Smallest k / n such that the k most frequent neurons carry >= mass of sum(p) (ActStats'
// neurons_covering on probabilities). 0 when sum(p) is 0.
double neurons_covering(const std::vector<double>& p, double mass);
// Per-layer firing curves resampled to n_layer x n_ff: target layer l takes source layer
// floor((l + 0.5) * L_src / n_layer); its sorted (descending) curve is sampled at rank quantile
// (j + 0.5) / n_ff with linear interpolation, and rank j is neuron j. Same shape: returned as is
// (neuron identities kept, so plan files still apply). Errors on empty or ragged input.
Result<std::vector<std::vector<double>>> rescale_firing(
    const std::vector<std::vector<double>>& src, int n_layer, int64_t n_ff);
// The serving distribution: per layer, round(share * n_ff) neurons chosen at random (seeded
// per layer) pass their p on to the next of them in a random cycle (every chosen neuron gets
// another's p). Each layer keeps its multiset of p (sparsity and coverage unchanged); only
// which neurons are hot changes. share 0: identical.
std::vector<std::vector<double>> drift_firing(const std::vector<std::vector<double>>& p,
                                              double share, uint64_t seed);
// Mean over layers of |top-k(a) & top-k(b)| / k, k = ceil(top_share * n_ff) (PowerInfer reports
// over 90% overlap of the top 20% across tasks).
double top_overlap(const std::vector<std::vector<double>>& a,
                   const std::vector<std::vector<double>>& b, double top_share);

// ---- hardware -----------------------------------------------------------------------------

struct HostEfficiency {
  std::string type;    // weight type measured ("q8_0"), or "" for the built-in table
  double dense = 0;    // engine dense decode GB/s / read probe GB/s
  // (firing share, sparse-row kernels' GB/s / dense decode GB/s), ascending share.
  std::vector<std::pair<double, double>> sparse_rel;
  // A hybrid layer's cold gate rows read in order by the row kernel (sparse_rows), GB/s over
  // the dense decode's; 0: sparse_at(1).
  double gate_rows_rel = 0;
  std::string source;
  // Upper bounds validate() holds the figures to. Physical only relative to what the same run
  // measured: the engine cannot read its weights faster than a plain read of a buffer that size
  // (dense_max: that read's GB/s over the DRAM probe's; rel_max: a read of an L1-sized buffer,
  // the fastest any row kernel can read, over the dense decode's GB/s), with room for timing
  // noise. A model that sits in cache is legitimately above 1. The defaults guard typed-in
  // figures and the built-in table (models far larger than the cache).
  double dense_max = 2.0;
  double rel_max = 4.0;
  // Piecewise-linear in the firing share, clamped at the ends; 1 when the table is empty.
  double sparse_at(double share) const;
  double gate_rows() const { return gate_rows_rel > 0 ? gate_rows_rel : sparse_at(1.0); }
  Status validate() const;
};
// From docs/BENCHMARKS.md's measurements on this machine (7B-shaped files, 2 threads): dense
// decode roofline shares and hc-ffn-bench sparse / dense FFN GB/s at 50/80/90/95% sparsity.
// Types without a measurement take the nearest measured one (the source says which).
HostEfficiency builtin_host_efficiency(GgmlType t);

struct HardwareSpec {
  std::string key;          // "rtx4090", "a100-80g", "a100-40g", "host"
  std::string description;
  // Host.
  double host_peak_gbps = 0;      // memory bandwidth (spec), or the measured probe for "host"
  double host_read_fraction = 1;  // STREAM-like read / peak (1 for a measured probe)
  int host_cores = 0;
  // Device.
  bool has_device = true;
  uint64_t dev_mem_bytes = 0;       // 0: no limit of its own (the CPU device)
  uint64_t dev_reserve_bytes = 0;   // CUDA context, workspaces: not for weights
  double dev_peak_gbps = 0;         // memory bandwidth (spec) or measured
  double dev_eff = 1;               // achieved / peak for decode-sized matrix-vector work
  double link_gbps = 0;             // host <-> device, effective
  double op_us = 0;                 // one queued device operation
  double sync_us = 0;               // one host/device round trip
  uint64_t dev_overhead_bytes = 0;  // charged at open (beyond the reserve)
  uint64_t dev_fixed_bytes = 0;     // the executor's device scratch
  // Host and device halves of a hybrid layer run at the same time (a GPU). False for a CPU
  // device whose threads share the host's cores: the halves then take the sum, not the max.
  bool overlap = true;
  // Extra seconds (in us) per weight-streaming operation and per copy: a CPU device paced to a
  // bandwidth (--device-emulate-gbps) sleeps, and each sleep overshoots. 0 otherwise.
  double paced_op_us = 0;
  std::string source;

  double host_read_gbps() const { return host_peak_gbps * host_read_fraction; }
  double dev_gbps() const { return dev_peak_gbps * dev_eff; }
  // Memory minus the reserve; for a device without a limit, UINT64_MAX / 4.
  uint64_t default_budget() const;
  Status validate() const;
};

// rtx4090, a100-80g, a100-40g (docs/SIMULATE.md cites each figure or marks it an assumption).
const std::vector<HardwareSpec>& hardware_catalog();
// By key ("rtx4090-pcie4-ddr5", "a100-80g-pcie", "a100" are accepted too); errors name the
// accepted keys.
Result<HardwareSpec> find_hardware(const std::string& key);

// ---- simulation ---------------------------------------------------------------------------

struct SimOptions {
  uint64_t budget_bytes = 0;  // device budget (overhead, scratch and KV of device layers in)
  int n_ctx = 2048;           // context: KV bytes on the device, half of it read per token
  int n_gpu_layers = -1;      // dense-offload: -1 as many whole layers as fit, else exactly N
                              // (N > n_layer also offloads the output, as llama.cpp's -ngl)
  double drift = 0;           // share of neurons whose ranks the serving distribution permutes
  uint64_t drift_seed = 1;
  double drift_period_tokens = 1024;  // tokens between drifts: migration amortised over it
  bool use_ilp = false;       // plan_best (greedy + ILP) instead of greedy alone
  double ilp_time_limit_s = 10;
  int granule = 32;
  const PlacementPlan* plan = nullptr;  // static: evaluate this plan (output stays on host)
  bool output_on_device = true;  // planned modes may put the output matrix on the device
  bool predictor = false;        // predictor-driven sparse FFN (gate over the predicted set)
  // The executor's --sparse-union-max: a host-only layer whose firing share passes it runs its
  // FFN dense over the row layout (every up and down_t row, at the in-order row rate).
  double max_union_share = 0.5;
  int64_t predictor_rank = 0;    // 0: n_embd / 16 (docs/BENCHMARKS.md's advice)
  int n_cpu_moe = -1;  // llamacpp-cpu-moe: -1 the fewest leading layers whose experts must stay
                       // on the host for the rest to fit, else exactly N
};

struct ModeResult {
  std::string mode;
  double s_per_token = 0;
  double tok_s = 0;
  uint64_t device_bytes = 0;
  // Share of the FFN's firing mass computed on the device (dense-offload: share of layers).
  double device_mass = 0;
  int layers_on_device = 0;  // dense-offload: whole layers; hot/cold: layers with device work
  int attn_on_device = 0;
  int64_t hot_neurons = 0;
  bool output_on_device = false;
  int n_cpu_moe = -1;  // llamacpp-cpu-moe: leading layers whose experts run on the host
  double migration_s = 0;              // dynamic: per-token link time of migrated bytes
  double migration_bytes_per_token = 0;
  // Hot/cold modes: whose plan: "greedy", "ilp", "previous" (plan_best's), "file" (given),
  // "refill" (dynamic: the static capacities refilled with the serving top-k).
  std::string solver;
};

struct SimInput {
  ModelBytes model;
  HardwareSpec hw;
  HostEfficiency eff;
  // [n_layer][n_units] p_i of the profiling distribution: a neuron's firing probability, or
  // (MoE) the share of tokens routed to the expert.
  std::vector<std::vector<double>> profile;
  // MoE: share of a routed expert's neurons firing per token (TurboSparse-Mixtral's dReLU
  // experts: 0.15); 1: dense experts. Only the hot/cold modes use it: llama.cpp reads experts
  // whole.
  double expert_firing = 1;
};

struct SimResult {
  // dense-cpu, sparse-cpu, dense-offload, static, dynamic; MoE: dense-cpu, sparse-cpu (sparse
  // experts only), dense-offload, llamacpp-cpu-moe, hot-experts, dynamic.
  std::vector<ModeResult> modes;
  double firing_share = 0;        // mean p over layers (MoE: n_expert_used / n_expert)
  double cover80 = 0;             // mean share of units covering 80% of the firings (routings)
  double top20_overlap = 1;       // profile vs serving (drift)
  const ModeResult* find(const std::string& mode) const;
  // The llama.cpp mode the others compare with: llamacpp-cpu-moe, else dense-offload; null
  // when neither ran.
  const ModeResult* llamacpp() const;
};

Status validate_input(const SimInput& in);

// The planner's input for the hybrid modes: per layer the attention, KV and neuron bytes, and
// the host's bytes in "dense-equivalent" units: host_gbps is the achieved dense rate
// (host read x eff.dense) and a sparse-row byte costs 1 / eff.sparse_at(share) of them (share:
// the layer's mean firing share for up / down rows, 1 for the cold gate rows read in order).
Result<PlanInput> hybrid_plan_input(const SimInput& in, const std::vector<std::vector<double>>& p,
                                    const SimOptions& opt);

// Seconds per token of the dense model with its last n_dev layers on the device (0: host only);
// output_dev puts the output matrix there too. Device bytes in *device_bytes when not null.
double dense_seconds(const SimInput& in, const SimOptions& opt, int n_dev, bool output_dev,
                     uint64_t* device_bytes);
// The most trailing whole layers (then the output) that fit opt.budget_bytes.
void dense_layers_that_fit(const SimInput& in, const SimOptions& opt, int* n_dev,
                           bool* output_dev);

// ---- MoE ----------------------------------------------------------------------------------

// One MoE layer in the planner's units, one per expert (docs/SIMULATE.md, "MoE"). Host bytes are
// dense-equivalent (what the host reads in the same time at its dense decode rate).
struct MoeLayerBytes {
  uint64_t attn = 0, kv = 0, kv_read = 0;  // attention; KV charged; KV read per token
  uint64_t router = 0;                     // router + FFN norm: read on the host every token
  uint64_t expert_store = 0;               // device bytes one hot expert takes
  uint64_t expert_device = 0;  // bytes the device reads per routing to one of its experts
  uint64_t expert_host = 0;    // host bytes per routing to a cold expert
};
// The planner's LayerCosts: fire_prob = routing [n_expert], neuron_bytes = expert_device,
// hot_store_bytes(n) = n x expert_store, host_neuron_bytes = expert_host, host_cold_bytes = 0,
// host_fixed_bytes = router. The engine's planning for MoE models can take it as is.
LayerCosts moe_layer_costs(const MoeLayerBytes& b, std::vector<double> routing);
// The whole PlanInput of an MoE model (device_reads_all_hot false: the device computes its
// routed experts only). Per routing, a dense expert is read whole on either side; a sparse one
// (in.expert_firing < 1) reads its predictor and its firing share f of gate, up and down_t rows
// (the host at the sparse-row rate rel(f)); without a predictor the whole gate (at the dense
// rate) and f of the up and down_t rows.
Result<PlanInput> moe_plan_input(const SimInput& in, const std::vector<std::vector<double>>& p,
                                 const SimOptions& opt);

// llama.cpp's MoE split on one device (-ngl, --n-cpu-moe): the trailing n_gpu_layers layers'
// attention, norms, router and KV on the device (the output matrix too when `output`), and the
// experts of layer l there when l >= n_cpu_moe and the layer is on the device; every other
// tensor is computed by the host, one side after the other.
struct CpuMoeSplit {
  int n_gpu_layers = 0;
  bool output = false;
  int n_cpu_moe = 0;
};
// Seconds per token of that split (device bytes in *device_bytes when not null).
double cpu_moe_seconds(const SimInput& in, const SimOptions& opt, const CpuMoeSplit& split,
                       uint64_t* device_bytes);
// Every layer and the output on the device and the fewest leading layers' experts on the host
// that fit opt.budget_bytes (opt.n_cpu_moe >= 0: exactly that many); when even the non-expert
// tensors do not all fit, the most trailing layers whose non-expert tensors fit, and every
// expert on the host.
CpuMoeSplit cpu_moe_split_that_fits(const SimInput& in, const SimOptions& opt);

// Every mode; each result's figures as documented above.
Result<SimResult> simulate(const SimInput& in, const SimOptions& opt);

}  // namespace hc::sparse
