// VulkanDevice: ops::Device (ops/device.h) on one Vulkan 1.2 device: a GPU, or Mesa's lavapipe
// (a CPU implementation of Vulkan), which is how CI runs this backend on every commit.
//
// ---- Memory ------------------------------------------------------------------------------
// Every alloc() is its own VkBuffer + VkDeviceMemory (device-local) created with
// SHADER_DEVICE_ADDRESS usage; the `void*` handed out is the buffer's device address, so device
// pointers do arithmetic as CUDA's do (k_cache + offset, w.row(j)) and shaders reach them
// through GL_EXT_buffer_reference (vk_abi.h): no descriptor sets, and no per-binding size limit
// (lavapipe's maxStorageBufferRange of 128 MiB does not apply to buffer references). Copies
// find the buffer holding an address in an ordered map. One allocation is capped by the
// driver's maxMemoryAllocationSize (2 GiB on lavapipe): larger requests fail with that number.
//   budget    opt.budget_bytes, or (0) the largest device-local heap.
//   charged   every live alloc() rounded up to kGranule (what the planners count; the driver's
//             own size, at most that, is measured_bytes()). No fixed overhead is charged.
//   host      alloc_host() buffers are host-visible, coherent and mapped: copies to and from
//             them are direct. Other host memory (the model's mapped weights in update_rows,
//             any caller's buffer) goes through staging buffers filled when the copy is queued
//             (copy_to_device) or read back at sync() (copy_to_host); staging is recycled at
//             every sync().
//
// ---- Queue -------------------------------------------------------------------------------
// One compute queue. Queued operations are recorded into a command buffer, each behind a
// global memory barrier (so they run in order as the contract says); the buffer is submitted
// when the host asks for results (copy_to_host), at sync(), or every kFlushOps operations, and
// then runs while the host goes on (this is the hybrid overlap). Submissions signal a
// timeline semaphore; sync() waits for the last value, runs the deferred host copies and
// reports the first error since the previous sync. A recorded step (begin_record .. end_record)
// is a command buffer of its own, kept and submitted again by replay (vk_queue.cpp); it may
// not stage copies (its host buffers must be alloc_host's) nor wait. Argument errors skip the
// operation and are recorded as "<op>: <what>"; a lost device (VK_ERROR_DEVICE_LOST) makes
// every later operation a no-op and every sync() an error naming it.
//
// ---- Kernels -----------------------------------------------------------------------------
// SPIR-V compiled at build time from shaders/*.comp (glslc) and embedded (vk_shaders.h);
// pipelines are created on first use, specialised (vk_abi.h) for the device type and for one
// token or a batch. Arithmetic follows the host's kernels (ops/cpu, quant), not plain fp32:
//   matmul    x is first quantised on the device to vec_dot_type(W) (quantize.comp), byte for
//             byte the host's quant::quantize_activations; then the mat-vec (groups of 8
//             tokens) takes the host's vec_dot block arithmetic (exact integer sums per block
//             times the block scales, shaders/vecdot.glsl), summing the block terms in fp32 in
//             its own order. A quantised x is reused by the next matmul of the same x when
//             nothing but matvecs (not writing x) was queued in between (Q, K, V; gate, up).
//   FFN ops   gate and up passes as matmul (x quantised once; fired as the host decides it),
//             the down accumulation over the transposed down matrix in fp32 with h unquantised,
//             acc = fma(h_j, w, acc) in index order as the host's sparse_down, as the CUDA
//             device does (ops/cuda/cuda_device.cu).
//   attention q and the softmax weights rounded to fp16 as the host's, exp to ~1 ulp.
// Work splits: on a GPU a workgroup per matvec row and an invocation per down column; on a CPU
// implementation (VkPhysicalDeviceProperties::deviceType CPU: lavapipe) whole rows per
// invocation (4 for one token, 1 for batches) in workgroups of 8, and 8 down columns per
// invocation, with no barrier: lavapipe runs a workgroup's invocations as SIMD lanes, pays a
// coroutine switch per lane group at every barrier, and loads every per-invocation address in
// a loop over the lanes; a workgroup per row cost it ~16 us, seconds per SmolLM2-135M token.
//
// ---- Precision -----------------------------------------------------------------------------
// Bit for bit the host's: the quantised activations, the dequantised weights, every integer
// block sum, fp16 rounding (KV stores, q, softmax weights), RoPE angles. Not: the fp32 order in
// which block terms and dot products are summed (the host: ggml's 8- or 16-lane order), fma
// fusion (lavapipe rounds fma()'s product first), exp (~1 ulp, the host's ggml expf), RoPE's
// sincos (~2 ulp, the host's glibc sincosf), the rmsnorm and softmax sums (fp32 / float-float,
// the host's double). So results differ from the host's by ~1e-7 relative per operation; but
// one such last-bit difference can move a later 8-bit activation quantisation by one level, and
// on SmolLM2 that moves logits by up to ~1: greedy tokens equal the host's except where the
// host's top two logits are that close.
//
// ---- Debugging knobs (environment) -------------------------------------------------------
//   HC_VK_PROFILE=1   every dispatch is waited for and timed; totals per shader (dispatches,
//                     workgroups, seconds) go to stderr when the device closes.
//   HC_VK_SPLIT       gpu | cpu | R0,L0,R1,L1: force the work splits (the GPU ones on lavapipe
//                     in tests; R rows per invocation and workgroup size L, one token / batch).
#include "ops/vulkan/vk_device.h"
#include "ops/vulkan/vk_device_impl.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "core/log.h"
#include "ops/checks/device_checks.h"
#include "ops/vulkan/vk_abi.h"
#include "ops/vulkan/vk_loader.h"
#include "ops/vulkan/vk_shaders.h"
#include "ops/vulkan/vk_testing.h"
#include "quant/quant.h"

namespace hc::ops::vk {
namespace {

std::string version_string(uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) +
         "." + std::to_string(VK_API_VERSION_PATCH(v));
}

const char* type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "gpu";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    default: return "other";
  }
}

// The features the shaders need, as queried from (or enabled on) one device.
struct Features {
  VkPhysicalDeviceVulkan12Features v12 = vk_struct<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  VkPhysicalDeviceVulkan11Features v11 = vk_struct<VkPhysicalDeviceVulkan11Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES);
  VkPhysicalDeviceFeatures2 f2 = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  Features() {
    f2.pNext = &v11;
    v11.pNext = &v12;
  }
  Features(const Features&) = delete;
  Features& operator=(const Features&) = delete;
  // What is missing for the backend ("" = usable).
  std::string missing() const {
    std::string m;
    auto need = [&](VkBool32 have, const char* name) {
      if (!have) m += (m.empty() ? "" : ", ") + std::string(name);
    };
    // What the SPIR-V declares (Int64, PhysicalStorageBufferAddresses, 8- and 16-bit storage)
    // and the queue's timeline semaphore; no 8/16-bit arithmetic or fp16 math.
    need(v12.bufferDeviceAddress, "bufferDeviceAddress");
    need(v12.timelineSemaphore, "timelineSemaphore");
    need(v12.storageBuffer8BitAccess, "storageBuffer8BitAccess");
    need(v11.storageBuffer16BitAccess, "storageBuffer16BitAccess");
    need(f2.features.shaderInt64, "shaderInt64");
    return m;
  }
  // Exactly the features above, on (for vkCreateDevice).
  void enable_needed() {
    v12.bufferDeviceAddress = v12.timelineSemaphore = v12.storageBuffer8BitAccess = VK_TRUE;
    v11.storageBuffer16BitAccess = VK_TRUE;
    f2.features.shaderInt64 = VK_TRUE;
  }
};

// A process-wide instance (created once; devices come and go).
struct Instance {
  Fns* f = nullptr;
  VkInstance inst = VK_NULL_HANDLE;
  std::vector<VkPhysicalDevice> phys;
};

Result<Instance*> instance() {
  static Instance in;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    auto f = load_vulkan();
    if (!f.ok()) {
      error = f.message();
      return;
    }
    in.f = *f;
    uint32_t api = VK_API_VERSION_1_0;
    in.f->vkEnumerateInstanceVersion(&api);
    if (api < VK_API_VERSION_1_2) {
      error = "the Vulkan loader supports only Vulkan " + version_string(api) + " (1.2 needed)";
      return;
    }
    VkApplicationInfo app = vk_struct<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
    app.pApplicationName = "hotcold";
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo ci = vk_struct<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
    ci.pApplicationInfo = &app;
    const Status st = vk_error(in.f->vkCreateInstance(&ci, nullptr, &in.inst), "vkCreateInstance");
    if (!st.ok()) {
      error = st.message();
      return;
    }
    if (Status s = load_instance_fns(*in.f, in.inst); !s.ok()) {
      error = s.message();
      return;
    }
    uint32_t n = 0;
    in.f->vkEnumeratePhysicalDevices(in.inst, &n, nullptr);
    in.phys.resize(n);
    if (n) in.f->vkEnumeratePhysicalDevices(in.inst, &n, in.phys.data());
    in.phys.resize(n);
  });
  if (!error.empty()) return Status::Error("Vulkan: " + error);
  return &in;
}

VulkanDeviceInfo describe(const Instance& in, int index) {
  VulkanDeviceInfo d;
  d.index = index;
  VkPhysicalDeviceProperties p{};
  in.f->vkGetPhysicalDeviceProperties(in.phys[static_cast<size_t>(index)], &p);
  d.name = p.deviceName;
  d.type = type_name(p.deviceType);
  d.api = version_string(p.apiVersion);
  if (p.apiVersion < VK_API_VERSION_1_2) {
    d.missing = "Vulkan 1.2";
  } else {
    Features feat;
    in.f->vkGetPhysicalDeviceFeatures2(in.phys[static_cast<size_t>(index)], &feat.f2);
    d.missing = feat.missing();
  }
  d.usable = d.missing.empty();
  return d;
}

const char* kWTypeNames[kVkWTypes] = {"f32", "f16", "bf16", "q4_0", "q4_1",
                                      "q8_0", "q4_k", "q5_k", "q6_k"};

}  // namespace

std::string mib(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
  return buf;
}

Status vk_error(VkResult r, const std::string& call) {
  if (r == VK_SUCCESS) return Status::Ok();
  return Status::Error(call + " failed: " + vk_result_name(r));
}

std::string pipe_name(int p) {
  if (p < kDown0) return std::string("matvec_") + kWTypeNames[(p - kMatvec0) % kVkWTypes];
  if (p < kRmsnorm) return std::string("down_") + kWTypeNames[(p - kDown0) % kVkWTypes];
  static const char* rest[] = {"rmsnorm",   "rope",       "kv_store", "glu", "add",
                               "attention", "read_probe", "quantize", "rows", "argmax",
                               "fire_mask", "moe"};
  return rest[p - kRmsnorm];
}

int wtype_of(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::BF16: return 2;
    case GgmlType::Q4_0: return 3;
    case GgmlType::Q4_1: return 4;
    case GgmlType::Q8_0: return 5;
    case GgmlType::Q4_K: return 6;
    case GgmlType::Q5_K: return 7;
    case GgmlType::Q6_K: return 8;
    default: return -1;
  }
}

VkXType xtype_of(GgmlType t) {
  switch (quant::vec_dot_type(t)) {
    case GgmlType::F16: return VkXType::kF16;
    case GgmlType::BF16: return VkXType::kBF16;
    case GgmlType::Q8_0: return VkXType::kQ8_0;
    case GgmlType::Q8_1: return VkXType::kQ8_1;
    case GgmlType::Q8_K: return VkXType::kQ8_K;
    default: return VkXType::kF32;
  }
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- open / close -------------------------------------------------------------------------

Result<std::unique_ptr<Device>> VulkanDevice::open(const DeviceOptions& opt) {
  std::unique_ptr<VulkanDevice> d(new VulkanDevice());
  HC_TRY(d->init(opt));
  return std::unique_ptr<Device>(std::move(d));
}

Status VulkanDevice::init(const DeviceOptions& opt) {
  HC_ASSIGN_OR_RETURN(Instance * in, instance());
  f_ = in->f;
  const int n = static_cast<int>(in->phys.size());
  int index = opt.vulkan_index;
  if (index < 0) {  // the first usable GPU
    for (int i = 0; i < n && index < 0; ++i) {
      const VulkanDeviceInfo d = describe(*in, i);
      if (d.usable && d.type == "gpu") index = i;
    }
    if (index < 0)
      return Status::Error("Vulkan: no usable GPU among " + std::to_string(n) +
                           " device(s); name a CPU implementation such as lavapipe explicitly "
                           "with --device vulkan:N (hotcold --version lists them)");
  }
  if (index >= n)
    return Status::Error("Vulkan: device " + std::to_string(index) + " requested, but the loader "
                         "sees " + std::to_string(n) + " (hotcold --version lists them)");
  const VulkanDeviceInfo info = describe(*in, index);
  if (!info.usable)
    return Status::Error("Vulkan: device " + std::to_string(index) + " (" + info.name +
                         ", Vulkan " + info.api + ") lacks " + info.missing);
  phys_ = in->phys[static_cast<size_t>(index)];
  name_ = info.name + " (Vulkan " + info.api + ")";

  uint32_t nq = 0;
  f_->vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  f_->vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, qf.data());
  bool found = false;
  for (uint32_t i = 0; i < nq && !found; ++i)
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) qfam_ = i, found = true;
  if (!found) return Status::Error("Vulkan: " + info.name + " has no compute queue");

  Features feat;
  feat.enable_needed();
  const float prio = 1.0f;
  VkDeviceQueueCreateInfo qci = vk_struct<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  qci.queueFamilyIndex = qfam_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &prio;
  VkDeviceCreateInfo dci = vk_struct<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  dci.pNext = &feat.f2;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  HC_TRY(vk_error(f_->vkCreateDevice(phys_, &dci, nullptr, &dev_), "vkCreateDevice"));
  HC_TRY(load_device_fns(*f_, dev_));
  f_->vkGetDeviceQueue(dev_, qfam_, 0, &queue_);

  // Memory types: device-local for buffers; host-visible + coherent (cached if offered) for
  // host buffers and staging.
  VkPhysicalDeviceMemoryProperties mp{};
  f_->vkGetPhysicalDeviceMemoryProperties(phys_, &mp);
  auto pick = [&](VkMemoryPropertyFlags want, VkMemoryPropertyFlags prefer) -> int {
    int best = -1;
    for (uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
      const VkMemoryPropertyFlags fl = mp.memoryTypes[i].propertyFlags;
      if ((fl & want) != want) continue;
      if (best < 0 || ((fl & prefer) == prefer &&
                       (mp.memoryTypes[best].propertyFlags & prefer) != prefer))
        best = static_cast<int>(i);
    }
    return best;
  };
  const int dt = pick(VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
  const int ht = pick(VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                      VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  if (dt < 0 || ht < 0)
    return Status::Error("Vulkan: " + info.name + " lacks a device-local or host-visible "
                         "coherent memory type");
  dev_type_ = static_cast<uint32_t>(dt);
  host_type_ = static_cast<uint32_t>(ht);
  uint64_t heap = 0;
  for (uint32_t i = 0; i < mp.memoryHeapCount; ++i)
    if (mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      heap = std::max<uint64_t>(heap, mp.memoryHeaps[i].size);
  budget_ = opt.budget_bytes ? opt.budget_bytes : heap;
  VkPhysicalDeviceMaintenance3Properties m3 = vk_struct<VkPhysicalDeviceMaintenance3Properties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
  VkPhysicalDeviceProperties2 p2 = vk_struct<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  p2.pNext = &m3;
  f_->vkGetPhysicalDeviceProperties2(phys_, &p2);
  max_alloc_ = m3.maxMemoryAllocationSize ? m3.maxMemoryAllocationSize : UINT64_MAX;

  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, 128};
  VkPipelineLayoutCreateInfo lci = vk_struct<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
  lci.pushConstantRangeCount = 1;
  lci.pPushConstantRanges = &range;
  HC_TRY(vk_error(f_->vkCreatePipelineLayout(dev_, &lci, nullptr, &layout_),
                  "vkCreatePipelineLayout"));
  VkCommandPoolCreateInfo pci = vk_struct<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = qfam_;
  HC_TRY(vk_error(f_->vkCreateCommandPool(dev_, &pci, nullptr, &pool_), "vkCreateCommandPool"));
  VkSemaphoreTypeCreateInfo tci = vk_struct<VkSemaphoreTypeCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO);
  tci.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  VkSemaphoreCreateInfo sci = vk_struct<VkSemaphoreCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO);
  sci.pNext = &tci;
  HC_TRY(vk_error(f_->vkCreateSemaphore(dev_, &sci, nullptr, &timeline_), "vkCreateSemaphore"));
  HC_ASSIGN_OR_RETURN(transfer_, make_buffer(kUploadChunk, /*host=*/true));
  // matvec work split (vk_abi.h MatvecPC): whole rows per invocation on a CPU implementation,
  // a workgroup per row on a GPU; HC_VK_ROWS_PER_LANE=R overrides it (tests run both on
  // lavapipe).
  VkPhysicalDeviceProperties props{};
  f_->vkGetPhysicalDeviceProperties(phys_, &props);
  if (props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) {
    split_[0] = kCpuSplitOneToken;
    split_[1] = kCpuSplitBatch;
  }
  if (const char* r = std::getenv("HC_VK_SPLIT"); r && *r) {
    const std::string v = r;
    if (v == "gpu") {
      split_[0] = split_[1] = MatvecSplit();
    } else if (v == "cpu") {
      split_[0] = kCpuSplitOneToken;
      split_[1] = kCpuSplitBatch;
    } else {  // "R0,L0,R1,L1": matvec rows per lane and workgroup size, one token and batches
      int n[4] = {0, 64, 0, 64};
      std::sscanf(r, "%d,%d,%d,%d", &n[0], &n[1], &n[2], &n[3]);
      for (int i = 0; i < 2; ++i) {
        split_[i].rows_per_lane = std::clamp(n[2 * i], 0, kVkMaxRowsPerLane);
        split_[i].local = split_[i].rows_per_lane ? std::clamp(n[2 * i + 1], 1, 1024) : 64;
      }
    }
  }
  down_groups_per_lane_ = split_[0].rows_per_lane > 0;
  native_half_ = props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  HC_TRY(measure_profile());
  reset_counters();  // the counters start at open, after the profile's measurements
  const char* prof = std::getenv("HC_VK_PROFILE");
  profile_ops_ = prof && *prof && std::string(prof) != "0";
  return Status::Ok();
}

VulkanDevice::~VulkanDevice() {
  if (!dev_) return;
  if (profile_ops_) {
    double total = 0;
    for (const OpTime& t : op_time_) total += t.s;
    std::fprintf(stderr, "HC_VK_PROFILE: %.3f s in dispatches (each waited for)\n", total);
    for (int p = 0; p < kPipes; ++p) {
      const OpTime& t = op_time_[static_cast<size_t>(p)];
      if (t.n)
        std::fprintf(stderr, "  %-12s %8llu dispatches %10llu groups %9.3f s %8.1f us/dispatch\n",
                     pipe_name(p).c_str(), static_cast<unsigned long long>(t.n),
                     static_cast<unsigned long long>(t.groups), t.s, t.s * 1e6 / t.n);
    }
  }
  if (lost_.empty()) f_->vkDeviceWaitIdle(dev_);
  for (VkPipeline p : pipes_)
    if (p) f_->vkDestroyPipeline(dev_, p, nullptr);
  if (layout_) f_->vkDestroyPipelineLayout(dev_, layout_, nullptr);
  if (timeline_) f_->vkDestroySemaphore(dev_, timeline_, nullptr);
  if (pool_) f_->vkDestroyCommandPool(dev_, pool_, nullptr);
  for (const Buf& b : staging_) destroy_buffer(b);
  destroy_buffer(transfer_);
  destroy_buffer(scratch_);
  destroy_buffer(xq_);
  for (auto& [a, b] : dev_bufs_) destroy_buffer(b);
  for (auto& [a, b] : host_bufs_) destroy_buffer(b);
  f_->vkDestroyDevice(dev_, nullptr);
}

// ---- memory -------------------------------------------------------------------------------

Result<Buf> VulkanDevice::make_buffer(uint64_t bytes, bool host) {
  Buf b;
  b.size = std::max<uint64_t>(bytes, 4);
  if (b.size > max_alloc_)
    return Status::Error("one allocation of " + mib(b.size) + " exceeds this device's " +
                         mib(max_alloc_) + " (maxMemoryAllocationSize)");
  VkBufferCreateInfo bci = vk_struct<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  bci.size = b.size;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
              VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  HC_TRY(vk_error(f_->vkCreateBuffer(dev_, &bci, nullptr, &b.buf), "vkCreateBuffer"));
  VkMemoryRequirements req{};
  f_->vkGetBufferMemoryRequirements(dev_, b.buf, &req);
  const uint32_t type = host ? host_type_ : dev_type_;
  if (!(req.memoryTypeBits & (1u << type))) {
    f_->vkDestroyBuffer(dev_, b.buf, nullptr);
    return Status::Error("Vulkan: the buffer cannot live in the chosen memory type");
  }
  VkMemoryAllocateFlagsInfo flags = vk_struct<VkMemoryAllocateFlagsInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO);
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  VkMemoryAllocateInfo ai = vk_struct<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  ai.pNext = &flags;
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type;
  if (VkResult r = f_->vkAllocateMemory(dev_, &ai, nullptr, &b.mem); r != VK_SUCCESS) {
    f_->vkDestroyBuffer(dev_, b.buf, nullptr);
    return Status::Error("vkAllocateMemory of " + mib(req.size) + " failed: " +
                         vk_result_name(r));
  }
  b.real = req.size;
  Status st = vk_error(f_->vkBindBufferMemory(dev_, b.buf, b.mem, 0), "vkBindBufferMemory");
  if (st.ok() && host) {
    void* m = nullptr;
    st = vk_error(f_->vkMapMemory(dev_, b.mem, 0, VK_WHOLE_SIZE, 0, &m), "vkMapMemory");
    b.map = static_cast<uint8_t*>(m);
  }
  if (!st.ok()) {
    destroy_buffer(b);
    return st;
  }
  VkBufferDeviceAddressInfo dai = vk_struct<VkBufferDeviceAddressInfo>(VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO);
  dai.buffer = b.buf;
  b.addr = f_->vkGetBufferDeviceAddress(dev_, &dai);
  if (b.addr == 0) {
    destroy_buffer(b);
    return Status::Error("Vulkan: a buffer got no device address");
  }
  return b;
}

void VulkanDevice::destroy_buffer(const Buf& b) {
  if (b.map) f_->vkUnmapMemory(dev_, b.mem);
  if (b.buf) f_->vkDestroyBuffer(dev_, b.buf, nullptr);
  if (b.mem) f_->vkFreeMemory(dev_, b.mem, nullptr);
}

Result<void*> VulkanDevice::alloc(uint64_t bytes, const char* what) {
  const uint64_t charge = charge_bytes(bytes);
  {
    std::lock_guard<std::mutex> lk(mem_mu_);
    if (charge > budget_ - std::min(budget_, charged_))
      return Status::Error("vulkan device: cannot allocate " + mib(charge) + " for " + what +
                           ": " + mib(charged_) + " of the " + mib(budget_) +
                           " budget already in use");
  }
  auto b = make_buffer(bytes, /*host=*/false);
  if (!b.ok())
    return Status::Error("vulkan device: cannot allocate " + mib(charge) + " for " + what +
                         ": " + b.message());
  b->charged = charge;
  std::lock_guard<std::mutex> lk(mem_mu_);
  if (charge > budget_ - std::min(budget_, charged_)) {  // another thread took it meanwhile
    destroy_buffer(*b);
    return Status::Error("vulkan device: cannot allocate " + mib(charge) + " for " + what +
                         ": the budget of " + mib(budget_) + " is in use");
  }
  charged_ += charge;
  real_ += b->real;
  dev_bufs_[b->addr] = *b;
  return reinterpret_cast<void*>(b->addr);
}

void VulkanDevice::free(void* p) {
  if (!p) return;
  Buf b;
  {
    std::lock_guard<std::mutex> lk(mem_mu_);
    auto it = dev_bufs_.find(addr_of(p));
    HC_CHECK(it != dev_bufs_.end());
    b = it->second;
    charged_ -= b.charged;
    real_ -= b.real;
    dev_bufs_.erase(it);
  }
  // Queued work may still read it: the contract keeps pointers valid until the next sync().
  if (cur_ || !in_flight_.empty()) (void)sync();
  destroy_buffer(b);
}

Result<void*> VulkanDevice::alloc_host(uint64_t bytes) {
  auto b = make_buffer(bytes, /*host=*/true);
  if (!b.ok()) return Status::Error("vulkan device: host buffer of " + mib(bytes) + ": " + b.message());
  std::lock_guard<std::mutex> lk(mem_mu_);
  host_bufs_[addr_of(b->map)] = *b;
  return static_cast<void*>(b->map);
}

void VulkanDevice::free_host(void* p) {
  if (!p) return;
  Buf b;
  {
    std::lock_guard<std::mutex> lk(mem_mu_);
    auto it = host_bufs_.find(addr_of(p));
    HC_CHECK(it != host_bufs_.end());
    b = it->second;
    host_bufs_.erase(it);
  }
  if (cur_ || !in_flight_.empty()) (void)sync();
  destroy_buffer(b);
}

// The buffer of `bufs` (keyed by start address) holding [addr, addr + bytes), and the offset.
bool find_in(const std::map<uint64_t, Buf>& bufs, uint64_t addr, uint64_t bytes, VkBuffer* buf,
             uint64_t* off) {
  auto it = bufs.upper_bound(addr);
  if (it == bufs.begin()) return false;
  --it;
  if (addr + bytes > it->first + it->second.size) return false;
  *buf = it->second.buf;
  *off = addr - it->first;
  return true;
}

bool VulkanDevice::find_device(uint64_t addr, uint64_t bytes, VkBuffer* buf, uint64_t* off) const {
  std::lock_guard<std::mutex> lk(mem_mu_);
  return find_in(dev_bufs_, addr, bytes, buf, off);
}

bool VulkanDevice::find_host(const void* p, uint64_t bytes, VkBuffer* buf, uint64_t* off) const {
  std::lock_guard<std::mutex> lk(mem_mu_);
  return find_in(host_bufs_, addr_of(p), bytes, buf, off);
}

Result<std::pair<const Buf*, uint64_t>> VulkanDevice::stage(uint64_t bytes) {
  not_replayable("a copy through staging (host memory not from alloc_host)");
  const uint64_t need = (bytes + 15) / 16 * 16;
  while (staging_chunk_ < staging_.size() && staging_used_ + need > staging_[staging_chunk_].size) {
    ++staging_chunk_;
    staging_used_ = 0;
  }
  if (staging_chunk_ == staging_.size()) {
    HC_ASSIGN_OR_RETURN(Buf b, make_buffer(std::max(kStagingChunk, need), /*host=*/true));
    staging_.push_back(b);
    staging_used_ = 0;
  }
  const Buf* b = &staging_[staging_chunk_];
  const uint64_t off = staging_used_;
  staging_used_ += need;
  return std::make_pair(b, off);
}

Status VulkanDevice::immediate_copy(VkBuffer src, uint64_t src_off, VkBuffer dst, uint64_t dst_off,
                                    uint64_t bytes) {
  VkCommandBuffer cb = record();
  if (!cb) return Status::Error(lost_.empty() ? first_error_ : lost_);
  VkBufferCopy region{src_off, dst_off, bytes};
  f_->vkCmdCopyBuffer(cb, src, dst, 1, &region);
  return wait_all();
}

Status VulkanDevice::upload(void* dst, const void* host_src, uint64_t bytes) {
  if (!lost_.empty()) return Status::Error("vulkan device: upload: device lost: " + lost_);
  HC_TRY(wait_all());
  VkBuffer buf;
  uint64_t off;
  if (!find_device(addr_of(dst), bytes, &buf, &off))
    return Status::Error("vulkan device: upload: " + std::to_string(bytes) +
                         " bytes at a pointer that is not inside one device allocation");
  const uint8_t* src = static_cast<const uint8_t*>(host_src);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(kUploadChunk, bytes - done);
    std::memcpy(transfer_.map, src + done, n);
    HC_TRY(immediate_copy(transfer_.buf, 0, buf, off + done, n));
    count_h2d(n);
    done += n;
  }
  return Status::Ok();
}

Status VulkanDevice::download(void* host_dst, const void* src, uint64_t bytes) {
  if (!lost_.empty()) return Status::Error("vulkan device: download: device lost: " + lost_);
  HC_TRY(wait_all());
  VkBuffer buf;
  uint64_t off;
  if (!find_device(addr_of(src), bytes, &buf, &off))
    return Status::Error("vulkan device: download: " + std::to_string(bytes) +
                         " bytes at a pointer that is not inside one device allocation");
  uint8_t* dst = static_cast<uint8_t*>(host_dst);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(kUploadChunk, bytes - done);
    HC_TRY(immediate_copy(buf, off + done, transfer_.buf, 0, n));
    count_d2h(n);
    std::memcpy(dst + done, transfer_.map, n);
    done += n;
  }
  return Status::Ok();
}

// One upload for the whole (possibly gathered) matrix, not one per row.
Result<TensorView> VulkanDevice::upload_weight(const TensorView& host, const int32_t* rows,
                                               int64_t row0, int64_t n_rows, const char* what) {
  const uint64_t rb = static_cast<uint64_t>(row_bytes(host.type, host.ne0));
  const uint64_t bytes = rb * static_cast<uint64_t>(n_rows);
  HC_ASSIGN_OR_RETURN(void* mem, alloc(bytes, what));
  Status st;
  if (rows == nullptr) {
    st = upload(mem, host.row(row0), bytes);
  } else {
    std::vector<uint8_t> gathered(bytes);
    for (int64_t j = 0; j < n_rows; ++j)
      std::memcpy(gathered.data() + rb * static_cast<uint64_t>(j), host.row(rows[j]), rb);
    st = upload(mem, gathered.data(), bytes);
  }
  if (!st.ok()) {
    free(mem);
    return st;
  }
  return TensorView::make(host.type, mem, host.ne0, n_rows);
}

void VulkanDevice::copy_to_device(void* dst, const void* host_src, uint64_t bytes) {
  if (!usable("copy_to_device") || bytes == 0) return;
  VkBuffer dbuf, sbuf;
  uint64_t doff, soff;
  if (!find_device(addr_of(dst), bytes, &dbuf, &doff))
    return fail("copy_to_device", "destination is not inside one device allocation");
  if (!find_host(host_src, bytes, &sbuf, &soff)) {  // any host memory: staged now
    auto s = stage(bytes);
    if (!s.ok()) return fail("copy_to_device", s.message());
    std::memcpy(s->first->map + s->second, host_src, bytes);
    sbuf = s->first->buf;
    soff = s->second;
  }
  VkCommandBuffer cb = record();
  if (!cb) return;
  VkBufferCopy region{soff, doff, bytes};
  f_->vkCmdCopyBuffer(cb, sbuf, dbuf, 1, &region);
  count_h2d(bytes);
}

void VulkanDevice::copy_to_host(void* host_dst, const void* src, uint64_t bytes) {
  if (!usable("copy_to_host") || bytes == 0) return;
  VkBuffer sbuf, dbuf;
  uint64_t soff, doff;
  if (!find_device(addr_of(src), bytes, &sbuf, &soff))
    return fail("copy_to_host", "source is not inside one device allocation");
  if (!find_host(host_dst, bytes, &dbuf, &doff)) {  // any host memory: read back at sync()
    auto s = stage(bytes);
    if (!s.ok()) return fail("copy_to_host", s.message());
    dbuf = s->first->buf;
    doff = s->second;
    deferred_.push_back({host_dst, s->first->map + s->second, bytes});
  }
  VkCommandBuffer cb = record();
  if (!cb) return;
  VkBufferCopy region{soff, doff, bytes};
  f_->vkCmdCopyBuffer(cb, sbuf, dbuf, 1, &region);
  count_d2h(bytes);
  // The host wants this: start the queue now, so it runs while the host works.
  if (Status st = flush(); !st.ok()) fail("copy_to_host", st.message());
}

void VulkanDevice::update_rows(const TensorView& w, const TensorView& host,
                               const int32_t* src_rows, const int32_t* slots, int64_t n) {
  if (!usable("update_rows") || n <= 0) return;
  const uint64_t rb = static_cast<uint64_t>(row_bytes(host.type, host.ne0));
  if (host.type != w.type || host.ne0 != w.ne0)
    return fail("update_rows", "host rows and device matrix differ in type or row length");
  auto s = stage(rb * static_cast<uint64_t>(n));
  if (!s.ok()) return fail("update_rows", s.message());
  VkBuffer dbuf;
  uint64_t doff;
  if (!find_device(addr_of(w.data), rb * static_cast<uint64_t>(w.ne1), &dbuf, &doff))
    return fail("update_rows", "the device matrix is not inside one device allocation");
  std::vector<VkBufferCopy> regions(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    if (slots[j] < 0 || slots[j] >= w.ne1 || src_rows[j] < 0 || src_rows[j] >= host.ne1)
      return fail("update_rows", "row " + std::to_string(src_rows[j]) + " -> slot " +
                                     std::to_string(slots[j]) + " is out of range");
    const uint64_t so = s->second + rb * static_cast<uint64_t>(j);
    std::memcpy(s->first->map + so, host.row(src_rows[j]), rb);
    regions[static_cast<size_t>(j)] = {so, doff + static_cast<uint64_t>(w.nb1) * slots[j], rb};
  }
  VkCommandBuffer cb = record();
  if (!cb) return;
  f_->vkCmdCopyBuffer(cb, s->first->buf, dbuf, static_cast<uint32_t>(n), regions.data());
  count_h2d(rb * static_cast<uint64_t>(n));
}

// ---- dispatch -----------------------------------------------------------------------------

Result<VkPipeline> VulkanDevice::pipeline(int p) {
  if (pipes_[static_cast<size_t>(p)]) return pipes_[static_cast<size_t>(p)];
  const std::string name = pipe_name(p);
  const SpirvBlob* blob = find_spirv(name);
  if (!blob) return Status::Error("no SPIR-V for shader '" + name + "' in this build");
  VkShaderModuleCreateInfo mci = vk_struct<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
  mci.codeSize = blob->words * sizeof(uint32_t);
  mci.pCode = blob->code;
  VkShaderModule mod = VK_NULL_HANDLE;
  HC_TRY(vk_error(f_->vkCreateShaderModule(dev_, &mci, nullptr, &mod),
                  "vkCreateShaderModule(" + name + ")"));
  VkComputePipelineCreateInfo ci = vk_struct<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  ci.stage = vk_struct<VkPipelineShaderStageCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO);
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = mod;
  ci.stage.pName = "main";
  // matvec: specialisation constants 0 (rows each invocation computes, 0: a workgroup per row)
  // and 1 (workgroup size) of the pipeline's split, and 2 (tokens per dispatch: 1 or up to 8).
  // down: 0 (columns per invocation: 0 or 8), 1 (workgroup size), 2 (tokens per dispatch).
  const bool one = p < kMatvecBatch0 || (p >= kDown0 && p < kDownBatch0);
  const int32_t tokens = one ? 1 : static_cast<int32_t>(kVkMaxVecTokens);
  const MatvecSplit& ms = split_[one ? 0 : 1];
  // Every shader: 3 (common.glsl HC_NATIVE_HALF: the device's fp16 conversion is exact).
  int32_t spec_data[4] = {ms.rows_per_lane, ms.local, tokens, native_half_ ? 1 : 0};
  if (p >= kDown0) {
    spec_data[0] = down_groups_per_lane_ ? 8 : 0;
    spec_data[1] = down_groups_per_lane_ ? kCpuDownLocal : 64;
  }
  // (Entries for constants a shader does not declare do nothing.)
  VkSpecializationMapEntry entries[4];
  for (uint32_t i = 0; i < 4; ++i) entries[i] = {i, i * 4, 4};
  const VkSpecializationInfo spec{4, entries, sizeof spec_data, spec_data};
  ci.stage.pSpecializationInfo = &spec;
  ci.layout = layout_;
  VkPipeline pipe = VK_NULL_HANDLE;
  const VkResult r = f_->vkCreateComputePipelines(dev_, VK_NULL_HANDLE, 1, &ci, nullptr, &pipe);
  f_->vkDestroyShaderModule(dev_, mod, nullptr);
  HC_TRY(vk_error(r, "vkCreateComputePipelines(" + name + ")"));
  pipes_[static_cast<size_t>(p)] = pipe;
  return pipe;
}

// groups: workgroups along x (split over y past 65535, vk_abi.h), or with gy > 0 an explicit
// (groups, gy) grid.
void VulkanDevice::dispatch(const char* op, int p, const void* pc, uint32_t pc_bytes,
                            uint64_t groups, uint32_t gy) {
  if (groups == 0) return;
  auto pipe = pipeline(p);
  if (!pipe.ok()) return fail(op, pipe.message());
  uint32_t gx = static_cast<uint32_t>(groups);
  if (gy == 0) {
    gx = static_cast<uint32_t>(std::min<uint64_t>(groups, 65535));
    gy = static_cast<uint32_t>((groups + 65534) / 65535);
  }
  double t0 = 0;
  if (profile_ops_) {
    (void)wait_all();
    t0 = seconds_now();
  }
  VkCommandBuffer cb = record();
  if (!cb) return;
  f_->vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, *pipe);
  f_->vkCmdPushConstants(cb, layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, pc_bytes, pc);
  f_->vkCmdDispatch(cb, gx, gy, 1);
  if (profile_ops_) {
    (void)wait_all();
    OpTime& t = op_time_[static_cast<size_t>(p)];
    t.s += seconds_now() - t0;
    ++t.n;
    t.groups += uint64_t{gx} * gy;
  }
  if (cur_ops_ >= kFlushOps) {
    if (Status st = flush(); !st.ok()) fail(op, st.message());
  }
}

// The shared weight checks (ops/checks), then: the rows lie inside one device allocation.
bool VulkanDevice::check_weight(const char* op, const char* name, const TensorView& w,
                                int64_t ne0) {
  if (std::string e = device_checks::weight(name, w, ne0); !e.empty()) {
    fail(op, e);
    return false;
  }
  VkBuffer b;
  uint64_t off;
  if (w.ne1 > 0 &&
      !find_device(addr_of(w.data),
                   static_cast<uint64_t>(w.nb1) * static_cast<uint64_t>(w.ne1 - 1) +
                       static_cast<uint64_t>(row_bytes(w.type, w.ne0)),
                   &b, &off)) {
    fail(op, std::string(name) + " (" + dtype_name(w.type) + "): not inside one device allocation");
    return false;
  }
  return true;
}

// ---- operations ---------------------------------------------------------------------------

void VulkanDevice::rmsnorm(float* out, const float* x, const float* w, int64_t n_tok, int64_t n,
                           float eps) {
  if (!usable("rmsnorm") || n_tok <= 0) return;
  RmsnormPC pc{addr_of(out), addr_of(x), addr_of(w), static_cast<int32_t>(n),
               static_cast<int32_t>(n_tok), eps, 0};
  dispatch("rmsnorm", kRmsnorm, &pc, sizeof pc, static_cast<uint64_t>(n_tok));
}

void VulkanDevice::argmax(const float* x, int64_t n_rows, int64_t n, int32_t* out) {
  if (!usable("argmax") || n_rows <= 0) return;
  if (std::string e = device_checks::negatives({{"n", n}}); !e.empty()) return fail("argmax", e);
  if (std::string e = device_checks::nulls({{"x", x}, {"out", out}}); !e.empty())
    return fail("argmax", e);
  ArgmaxPC pc{addr_of(x), addr_of(out), n, static_cast<int32_t>(n_rows), 0};
  dispatch("argmax", kArgmax, &pc, sizeof pc, static_cast<uint64_t>(n_rows));
}

void VulkanDevice::moe_topk(float* x, int64_t n_tok, int n_expert, int k, const MoeGate& gate,
                            int32_t* ids, float* w) {
  if (!usable("moe_topk") || n_tok <= 0) return;
  if (std::string e = device_checks::moe_topk(x, n_tok, n_expert, k, ids, w); !e.empty())
    return fail("moe_topk", e);
  if (n_tok > INT32_MAX) return fail("moe_topk", "too many rows for one dispatch");
  MoePC pc{addr_of(x), addr_of(ids), addr_of(w), 0, 0, 0, static_cast<int32_t>(n_tok), n_expert,
           k, gate.kind, gate.norm_w ? 1 : 0, 0, gate.w_scale, 0};
  dispatch("moe_topk", kMoe, &pc, sizeof pc, static_cast<uint64_t>(n_tok));
}

void VulkanDevice::matmul_id(const TensorView& w, int64_t rows, const int32_t* ids,
                             int64_t n_ids, const float* x, int64_t x_stride, float* y) {
  if (!usable("matmul_id") || n_ids <= 0) return;
  if (std::string e = device_checks::matmul_id(w, rows, ids, n_ids, x, x_stride, y); !e.empty())
    return fail("matmul_id", e);
  if (!check_weight("matmul_id", "weight", w, -1)) return;
  const int64_t n_mat = w.ne1 / rows;
  if (rows > INT32_MAX || w.ne0 > INT32_MAX || n_mat > INT32_MAX)
    return fail("matmul_id", "matrix too large for one dispatch");
  // The inputs quantised once (one row for every id, or a row per id), then one one-token
  // mat-vec per id on its matrix (mode 4), each as a one-row matmul computes it.
  MatvecPC pc{};
  if (!quantize_x("matmul_id", w.type, x, x_stride ? n_ids : 1, w.ne0, &pc.x, &pc.nbx)) return;
  const uint64_t x0 = pc.x;
  pc.w = addr_of(w.data);
  pc.nb1 = w.nb1;
  pc.ne0 = static_cast<int32_t>(w.ne0);
  pc.n_rows = static_cast<int32_t>(rows);
  pc.n_tok = 1;
  pc.ldy = static_cast<int32_t>(rows);
  pc.mode = 4;
  pc.idx = addr_of(ids);
  pc.nb1_up = rows * w.nb1;
  pc.glu_kind = static_cast<int32_t>(n_mat);
  const uint64_t seq = ops_recorded_;
  for (int64_t j = 0; j < n_ids; ++j) {
    pc.ld_fire = static_cast<int32_t>(j);
    pc.x = x0 + (x_stride ? static_cast<uint64_t>(j * pc.nbx) : 0);
    pc.y = addr_of(y + j * rows);
    matvec("matmul_id", w, pc);
  }
  keep_xq(seq, x, (x_stride ? n_ids : 1) * w.ne0, y, n_ids * rows);
}

void VulkanDevice::moe_combine(const float* y, const float* w, int64_t n_tok, int k, int64_t n,
                               float* out) {
  if (!usable("moe_combine") || n_tok <= 0 || n <= 0) return;
  if (std::string e = device_checks::moe_combine(y, w, n_tok, k, n, out); !e.empty())
    return fail("moe_combine", e);
  MoePC pc{addr_of(y), 0, addr_of(w), addr_of(out), n, n_tok * n, static_cast<int32_t>(n_tok),
           0, k, 0, 0, 1, 0.0f, 0};
  dispatch("moe_combine", kMoe, &pc, sizeof pc, elem_groups(n_tok * n));
}

void VulkanDevice::fire_mask(const float* x, int64_t n_tok, int64_t n, const int32_t* cols,
                             int64_t n_cols, float threshold, uint8_t* fire) {
  if (!usable("fire_mask") || n_tok <= 0 || n_cols <= 0) return;
  if (std::string e = device_checks::fire_mask(x, n, cols, n_cols, fire); !e.empty())
    return fail("fire_mask", e);
  FireMaskPC pc{addr_of(x), addr_of(cols), addr_of(fire), n, n_cols, n_tok * n_cols, threshold, 0};
  dispatch("fire_mask", kFireMask, &pc, sizeof pc, elem_groups(n_tok * n_cols));
}

void VulkanDevice::rope(float* x, int64_t n_tok, int n_head, int head_dim, int n_rot,
                        DevicePos pos, float theta_scale, float freq_scale,
                        const float* freq_factors, bool neox) {
  if (!usable("rope")) return;
  const int pos0 = pos.host();
  if (std::string e = device_checks::rope(n_rot, head_dim, pos0); !e.empty())
    return fail("rope", e);
  if (n_rot % 2 != 0) return fail("rope", "n_rot " + std::to_string(n_rot) + " must be even");
  // As the CPU device: nothing to rotate is no error; a null x would fault the device.
  if (n_tok <= 0 || n_head <= 0) return;
  if (std::string e = device_checks::nulls({{"x", x}}); !e.empty()) return fail("rope", e);
  RopePC pc{addr_of(x), addr_of(freq_factors), addr_of(pos.dev), static_cast<int32_t>(n_tok),
            n_head, head_dim, n_rot, pos0, theta_scale, freq_scale, neox ? 1 : 0};
  dispatch("rope", kRope, &pc, sizeof pc, elem_groups(n_tok * n_head * (n_rot / 2)));
}

void VulkanDevice::kv_store(const float* k, const float* v, int64_t n_tok, DevicePos pos,
                            int64_t kv_dim, int n_ctx, fp16_t* k_cache, fp16_t* v_cache_t) {
  if (!usable("kv_store")) return;
  const int pos0 = pos.host();
  if (std::string e = device_checks::kv_store(n_tok, pos0, kv_dim, n_ctx); !e.empty())
    return fail("kv_store", e);
  KvStorePC pc{addr_of(k), addr_of(v), addr_of(k_cache), addr_of(v_cache_t), addr_of(pos.dev),
               static_cast<int32_t>(kv_dim), static_cast<int32_t>(n_tok), pos0, n_ctx};
  dispatch("kv_store", kKvStore, &pc, sizeof pc, elem_groups(n_tok * kv_dim));
}

void VulkanDevice::attention(const float* q, const fp16_t* k_cache, const fp16_t* v_cache_t,
                             DevicePos pos, int64_t n_tok, const AttentionShape& shape,
                             float scale, float* out) {
  if (!usable("attention")) return;
  const int pos0 = pos.host();
  const int hd = shape.head_dim;
  static_assert(kVkMaxHeadDim == device_checks::kMaxHeadDim);
  if (std::string e = device_checks::attention(shape, pos0, n_tok); !e.empty())
    return fail("attention", e);
  if (n_tok > 65535)  // the grid's y (vk_abi.h)
    return fail("attention", std::to_string(n_tok) + " tokens in one call (at most 65535)");
  if (n_tok <= 0 || shape.n_head <= 0) return;
  AttentionPC pc{addr_of(q), addr_of(k_cache), addr_of(v_cache_t), addr_of(out),
                 addr_of(pos.dev), shape.k_stride, shape.v_stride, pos0, static_cast<int32_t>(n_tok),
                 shape.n_head, shape.n_head_kv, hd, scale};
  dispatch("attention", kAttention, &pc, sizeof pc, static_cast<uint64_t>(shape.n_head),
           static_cast<uint32_t>(n_tok));
}

void VulkanDevice::glu(float* gate, const float* up, int64_t n_tok, int64_t n, GluKind kind) {
  if (!usable("glu") || n_tok <= 0 || n <= 0) return;
  GluPC pc{addr_of(gate), addr_of(up), n_tok * n, static_cast<int>(kind), 0};
  dispatch("glu", kGlu, &pc, sizeof pc, elem_groups(n_tok * n));
}

void VulkanDevice::add(float* y, const float* x, int64_t n) {
  if (!usable("add") || n <= 0) return;  // (a negative n would size a huge grid)
  AddPC pc{addr_of(y), addr_of(x), n, 0};
  dispatch("add", kAdd, &pc, sizeof pc, elem_groups(n));
}

// The checks below are the CPU device's (cpu_device.cpp), in its order, so that every kind
// reports the same: an empty operation does nothing, even with null pointers; a null pointer
// of a non-empty one is an error (here it would fault the device).
void VulkanDevice::add_rows(float* y, const float* b, int64_t n_tok, int64_t n) {
  if (!usable("add_rows") || n <= 0 || n_tok <= 0) return;
  if (std::string e = device_checks::nulls({{"y", y}, {"b", b}}); !e.empty())
    return fail("add_rows", e);
  AddPC pc{addr_of(y), addr_of(b), n_tok * n, n};
  dispatch("add_rows", kAdd, &pc, sizeof pc, elem_groups(n_tok * n));
}

void VulkanDevice::get_rows(float* dst, const float* src, const int32_t* idx, int64_t n,
                            int64_t width) {
  if (!usable("get_rows") || n <= 0 || width <= 0) return;
  if (std::string e = device_checks::nulls({{"dst", dst}, {"src", src}, {"idx", idx}}); !e.empty())
    return fail("get_rows", e);
  RowsPC pc{addr_of(dst), addr_of(src), addr_of(idx), 0, 0, n, width};
  dispatch("get_rows", kRows, &pc, sizeof pc, elem_groups(n * width));
}

void VulkanDevice::set_rows_scaled(float* dst, const float* src, const int32_t* idx,
                                   const float* scale, int64_t n, int64_t width) {
  if (!usable("set_rows_scaled") || n <= 0 || width <= 0) return;
  if (std::string e =
          device_checks::nulls({{"dst", dst}, {"src", src}, {"idx", idx}, {"scale", scale}});
      !e.empty())
    return fail("set_rows_scaled", e);
  RowsPC pc{addr_of(dst), addr_of(src), 0, addr_of(idx), addr_of(scale), n, width};
  dispatch("set_rows_scaled", kRows, &pc, sizeof pc, elem_groups(n * width));
}

uint64_t VulkanDevice::matvec_groups(int64_t n_rows, int64_t n_tok) const {
  const MatvecSplit& ms = split_[n_tok > 1 ? 1 : 0];
  const int64_t per = ms.rows_per_lane > 0 ? int64_t{ms.local} * ms.rows_per_lane : 1;
  return static_cast<uint64_t>((n_rows + per - 1) / per);
}

void VulkanDevice::matvec(const char* op, const TensorView& w, const MatvecPC& base) {
  for (int64_t t0 = 0; t0 < base.n_tok; t0 += kVkMaxVecTokens) {
    MatvecPC pc = base;
    pc.n_tok = static_cast<int32_t>(std::min<int64_t>(kVkMaxVecTokens, base.n_tok - t0));
    pc.x = base.x + static_cast<uint64_t>(t0 * base.nbx);
    pc.y = base.y + static_cast<uint64_t>(t0 * base.ldy) * sizeof(float);
    pc.fire = base.fire ? base.fire + static_cast<uint64_t>(t0 * base.ld_fire) : 0;
    pc.gate = base.gate ? base.gate + static_cast<uint64_t>(t0 * base.ldy) * sizeof(float) : 0;
    dispatch(op, matvec_pipe(w.type, pc.n_tok), &pc, sizeof pc,
             matvec_groups(base.n_rows, pc.n_tok));
  }
}

bool VulkanDevice::quantize_x(const char* op, GgmlType type, const float* x, int64_t n_tok,
                              int64_t ne0, uint64_t* xq, int64_t* nbx) {
  const VkXType vt = xtype_of(type);
  if (vt == VkXType::kF32) {  // F32 weights take the fp32 activations as they are
    *xq = addr_of(x);
    *nbx = ne0 * static_cast<int64_t>(sizeof(float));
    return true;
  }
  const GgmlType gt = quant::vec_dot_type(type);
  *nbx = row_bytes(gt, ne0);
  const XqKey key{addr_of(x), n_tok, ne0, static_cast<int32_t>(vt)};
  if (key == xq_key_ && xq_seq_ == ops_recorded_ && xq_.buf) {
    *xq = xq_.addr;
    return true;
  }
  const uint64_t bytes = static_cast<uint64_t>(n_tok * *nbx);
  VkBuffer b;
  uint64_t off;
  if (!find_device(addr_of(x), static_cast<uint64_t>(n_tok * ne0) * sizeof(float), &b, &off)) {
    fail(op, "x is not inside one device allocation");
    return false;
  }
  if (!ensure_scratch(xq_, bytes, op, "quantised activations")) return false;
  const int64_t unit = vt == VkXType::kQ8_K                             ? 256
                       : vt == VkXType::kQ8_0 || vt == VkXType::kQ8_1 ? 32
                                                                      : 1;
  QuantizePC pc{addr_of(x), xq_.addr, *nbx, static_cast<int32_t>(ne0),
                static_cast<int32_t>(n_tok), static_cast<int32_t>(vt), 0};
  const uint64_t before = ops_recorded_;
  dispatch(op, kQuantize, &pc, sizeof pc, elem_groups(n_tok * (ne0 / unit)));
  if (ops_recorded_ == before) {  // not queued (failed, recorded)
    xq_key_ = XqKey();
    return false;
  }
  xq_key_ = key;
  xq_seq_ = ops_recorded_;
  *xq = xq_.addr;
  return true;
}

void VulkanDevice::matmul(const TensorView& w, const float* x, int64_t n_tok, float* y) {
  if (!usable("matmul")) return;
  if (!check_weight("matmul", "weight", w, -1) || n_tok <= 0 || w.ne1 == 0) return;
  if (w.ne1 > INT32_MAX || w.ne0 > INT32_MAX || n_tok > INT32_MAX)
    return fail("matmul", "matrix too large for one dispatch");
  MatvecPC pc{};
  if (!quantize_x("matmul", w.type, x, n_tok, w.ne0, &pc.x, &pc.nbx)) return;
  pc.w = addr_of(w.data);
  pc.nb1 = w.nb1;
  pc.ne0 = static_cast<int32_t>(w.ne0);
  pc.n_rows = static_cast<int32_t>(w.ne1);
  pc.n_tok = static_cast<int32_t>(n_tok);
  pc.y = addr_of(y);
  pc.ldy = static_cast<int32_t>(w.ne1);
  pc.mode = 0;
  const uint64_t seq = ops_recorded_;
  matvec("matmul", w, pc);
  keep_xq(seq, x, n_tok * w.ne0, y, n_tok * w.ne1);
}

void VulkanDevice::keep_xq(uint64_t seq, const float* x, int64_t nx, const float* y, int64_t ny) {
  const uint64_t xb = addr_of(x), xe = xb + static_cast<uint64_t>(nx) * sizeof(float);
  const uint64_t yb = addr_of(y), ye = yb + static_cast<uint64_t>(ny) * sizeof(float);
  if (xq_seq_ == seq && (ye <= xb || yb >= xe)) xq_seq_ = ops_recorded_;
}

constexpr uint64_t kMinScratch = 64 * 1024;  // no regrowing for every small increase

Status VulkanDevice::grow_scratch(Buf& buf, uint64_t bytes, const char* what) {
  if (buf.size >= bytes) return Status::Ok();
  if (buf.buf) {
    HC_TRY(wait_all());  // queued work may use the old one
    std::lock_guard<std::mutex> lk(mem_mu_);
    charged_ -= buf.charged;
    real_ -= buf.real;
    destroy_buffer(buf);
    buf = Buf();
  }
  bytes = std::max<uint64_t>(bytes, kMinScratch);
  const uint64_t charge = charge_bytes(bytes);
  {
    std::lock_guard<std::mutex> lk(mem_mu_);
    if (charge > budget_ - std::min(budget_, charged_))
      return Status::Error(std::string("cannot allocate ") + mib(charge) + " of " + what +
                           " scratch: " + mib(charged_) + " of the " + mib(budget_) +
                           " budget already in use");
  }
  auto b = make_buffer(bytes, /*host=*/false);
  if (!b.ok()) return Status::Error(std::string(what) + " scratch: " + b.message());
  buf = *b;
  buf.charged = charge;
  std::lock_guard<std::mutex> lk(mem_mu_);
  charged_ += charge;
  real_ += buf.real;
  return Status::Ok();
}

bool VulkanDevice::ensure_scratch(Buf& buf, uint64_t bytes, const char* op, const char* what) {
  if (buf.size >= bytes) return true;
  Status st = grow_scratch(buf, bytes, what);
  if (!st.ok()) fail(op, st.message());
  return st.ok();
}

void VulkanDevice::scratch_sizes(const ScratchNeeds& n, uint64_t* xq, uint64_t* ffn) {
  *xq = *ffn = 0;
  const auto x_bytes = [&](const WeightShape& w) -> uint64_t {
    if (xtype_of(w.type) == VkXType::kF32) return 0;  // read in place (quantize_x)
    return static_cast<uint64_t>(n.max_tokens) *
           static_cast<uint64_t>(row_bytes(quant::vec_dot_type(w.type), w.ne0));
  };
  for (const WeightShape& w : n.matmul) *xq = std::max(*xq, x_bytes(w));
  for (const WeightShape& w : n.ffn) {
    *xq = std::max(*xq, x_bytes(w));
    *ffn = std::max(*ffn, static_cast<uint64_t>(kVkMaxVecTokens * w.ne1) * sizeof(float));
  }
}

uint64_t VulkanDevice::scratch_bytes(const ScratchNeeds& n) const {
  uint64_t xq, ffn;
  scratch_sizes(n, &xq, &ffn);
  return (xq ? charge_bytes(std::max(xq, kMinScratch)) : 0) +
         (ffn ? charge_bytes(std::max(ffn, kMinScratch)) : 0);
}

Status VulkanDevice::reserve_scratch(const ScratchNeeds& n) {
  if (!lost_.empty()) return Status::Error("vulkan device: device lost: " + lost_);
  uint64_t xq, ffn;
  scratch_sizes(n, &xq, &ffn);
  if (xq) HC_TRY(grow_scratch(xq_, xq, "quantised activations").with_context("vulkan device"));
  if (ffn) HC_TRY(grow_scratch(scratch_, ffn, "ffn").with_context("vulkan device"));
  return Status::Ok();
}

void VulkanDevice::ffn_threshold(const TensorView& gate, const float* gate_bias,
                                 const TensorView& up, const TensorView& down_t, const float* x,
                                 int64_t n_tok, float threshold, GluKind kind, float* out) {
  if (!usable("ffn_threshold")) return;
  ffn("ffn_threshold", {&gate, gate_bias, &up, &down_t, x, n_tok, nullptr, gate.ne1, nullptr,
                        threshold, kind, out});
}

void VulkanDevice::ffn_rows(const TensorView& gate, const float* gate_bias, const TensorView& up,
                            const TensorView& down_t, const float* x, int64_t n_tok,
                            const int32_t* idx, int64_t n_idx, const uint8_t* fire, GluKind kind,
                            float* out) {
  if (!usable("ffn_rows")) return;
  ffn("ffn_rows", {&gate, gate_bias, &up, &down_t, x, n_tok, idx, n_idx, fire, 0.0f, kind, out});
}

void VulkanDevice::ffn(const char* op, const FfnArgs& a) {
  if (std::string e = device_checks::ffn(*a.gate, *a.up, *a.down_t, a.kind); !e.empty())
    return fail(op, e);
  const bool ungated = a.kind == GluKind::kReluUngated;  // no up: h = fired ? relu(g) : 0
  if (!check_weight(op, "gate", *a.gate, -1) ||
      (!ungated && !check_weight(op, "up", *a.up, -1)) ||
      !check_weight(op, "down_t", *a.down_t, -1))
    return;
  if (a.n_tok <= 0) return;
  const int64_t n_embd = a.gate->ne0;
  if (a.n_rows <= 0) {  // nothing fires: out = 0
    VkBuffer b;
    uint64_t off;
    const uint64_t bytes = static_cast<uint64_t>(a.n_tok * n_embd) * sizeof(float);
    if (!find_device(addr_of(a.out), bytes, &b, &off))
      return fail(op, "out is not inside one device allocation");
    VkCommandBuffer cb = record();
    if (cb) f_->vkCmdFillBuffer(cb, b, off, bytes, 0);
    return;
  }
  if (a.n_rows > INT32_MAX || n_embd > INT32_MAX || a.n_tok > INT32_MAX)
    return fail(op, "too many neurons or tokens");
  if (!ensure_scratch(scratch_, static_cast<uint64_t>(kVkMaxVecTokens * a.n_rows) * sizeof(float),
                      op, "ffn"))
    return;
  // gate and up read x quantised once for all tokens (when their types pair with the same
  // activation type; quantize_x reuses it while the passes, writing h and out, leave x alone).
  const uint64_t h = scratch_.addr;
  const float* hp = reinterpret_cast<const float*>(h);
  const int64_t nx = a.n_tok * n_embd, nh = kVkMaxVecTokens * a.n_rows;
  for (int64_t t0 = 0; t0 < a.n_tok; t0 += kVkMaxVecTokens) {
    const int64_t nt = std::min(kVkMaxVecTokens, a.n_tok - t0);
    MatvecPC g{};
    if (!quantize_x(op, a.gate->type, a.x, a.n_tok, n_embd, &g.x, &g.nbx)) return;
    g.x += static_cast<uint64_t>(t0 * g.nbx);
    g.w = addr_of(a.gate->data);
    g.nb1 = a.gate->nb1;
    g.ne0 = static_cast<int32_t>(n_embd);
    g.n_rows = static_cast<int32_t>(a.n_rows);
    g.idx = addr_of(a.idx);
    g.n_tok = static_cast<int32_t>(nt);
    g.y = h;
    g.ldy = static_cast<int32_t>(a.n_rows);
    g.mode = a.fire ? 1 : 0;
    g.fire = a.fire ? addr_of(a.fire) + static_cast<uint64_t>(t0 * a.n_rows) : 0;
    g.ld_fire = static_cast<int32_t>(a.n_rows);
    g.glu_kind = static_cast<int>(a.kind);
    g.threshold = a.threshold;
    g.bias = a.gate_bias ? addr_of(a.gate_bias) : 0;
    uint64_t seq = ops_recorded_;
    if (fuse_gate_up(a)) {  // gate and up in one dispatch (mode 3): h as the two passes leave it
      g.mode = 3;
      g.w_up = addr_of(a.up->data);
      g.nb1_up = a.up->nb1;
      dispatch(op, matvec_pipe(a.gate->type, nt), &g, sizeof g, matvec_groups(a.n_rows, nt));
      keep_xq(seq, a.x, nx, hp, nh);
    } else {
      dispatch(op, matvec_pipe(a.gate->type, nt), &g, sizeof g, matvec_groups(a.n_rows, nt));
      keep_xq(seq, a.x, nx, hp, nh);
      if (!up_pass(op, a, g, t0, nx, nh)) return;
    }
    float* out = a.out + t0 * n_embd;
    DownPC d{addr_of(a.down_t->data), h, addr_of(a.idx), addr_of(out), a.down_t->nb1,
             static_cast<int32_t>(n_embd), static_cast<int32_t>(a.n_rows),
             static_cast<int32_t>(nt), 0};
    seq = ops_recorded_;
    dispatch(op, down_pipe(a.down_t->type, nt), &d, sizeof d, down_groups(n_embd));
    keep_xq(seq, a.x, nx, out, nt * n_embd);
  }
}

// The FFN's up pass (mode 2) after a gate pass g: h = fired ? act(g) * (up . x) : 0, in place;
// ungated, the same pass reads no weights and writes h = fired ? relu(g) : 0 (the gate's x and
// rows as harmless stand-ins). False: the activations could not be quantised (reported).
bool VulkanDevice::up_pass(const char* op, const FfnArgs& a, const MatvecPC& g, int64_t t0,
                           int64_t nx, int64_t nh) {
  const bool ungated = a.kind == GluKind::kReluUngated;
  MatvecPC u = g;
  u.bias = 0;
  const TensorView& uw = ungated ? *a.gate : *a.up;
  if (!quantize_x(op, uw.type, a.x, a.n_tok, a.gate->ne0, &u.x, &u.nbx)) return false;
  u.x += static_cast<uint64_t>(t0 * u.nbx);
  u.w = addr_of(uw.data);
  u.nb1 = uw.nb1;
  u.mode = 2;
  u.gate = g.y;
  const uint64_t seq = ops_recorded_;
  dispatch(op, matvec_pipe(uw.type, g.n_tok), &u, sizeof u, matvec_groups(a.n_rows, g.n_tok));
  keep_xq(seq, a.x, nx, reinterpret_cast<const float*>(g.y), nh);
  return true;
}

// Whether ffn computes h in one dispatch (matvec mode 3): a gated kind whose gate and up share
// a type (so one quantised x), unless HOTCOLD_VK_FFN_FUSED=0 (the two passes, same bits).
bool VulkanDevice::fuse_gate_up(const FfnArgs& a) const {
  return ffn_fused_ && a.kind != GluKind::kReluUngated && a.up && a.up->type == a.gate->type;
}

// ---- profile ------------------------------------------------------------------------------

Status VulkanDevice::measure_profile() {
  // Temporary buffers outside the budget (freed before open returns): 64 MiB to read and copy.
  constexpr uint64_t kProbe = 64 * kMiB;
  HC_ASSIGN_OR_RETURN(Buf big, make_buffer(kProbe, /*host=*/false));
  auto sink = make_buffer(kGranule, /*host=*/false);
  auto host = make_buffer(kProbe, /*host=*/true);
  Status st = !sink.ok() ? sink.status() : host.status();
  if (st.ok()) {
    float* small = reinterpret_cast<float*>(sink->addr);
    // Queue round trip: one tiny operation submitted and waited for.
    const int rounds = 20;
    double t0 = seconds_now();
    for (int i = 0; i < rounds && st.ok(); ++i) {
      add(small, small, 16);
      st = sync();
    }
    profile_.sync_us = (seconds_now() - t0) * 1e6 / rounds;
    // One queued operation: many tiny dispatches in one submission.
    const int ops = 200;
    t0 = seconds_now();
    for (int i = 0; i < ops; ++i) add(small, small, 16);
    if (st.ok()) st = sync();
    profile_.op_us = std::max(0.0, ((seconds_now() - t0) * 1e6 - profile_.sync_us) / ops);
    // Device memory read bandwidth (best of 3 after one that creates the pipeline) and the
    // host -> device copy bandwidth (best of 3).
    ReadProbePC pc{big.addr, sink->addr, static_cast<int64_t>(kProbe / 16)};
    double best = 1e30;
    for (int i = 0; i < 4 && st.ok(); ++i) {
      t0 = seconds_now();
      dispatch("profile", kReadProbe, &pc, sizeof pc, elem_groups(pc.n_words));
      st = sync();
      if (i > 0) best = std::min(best, seconds_now() - t0);
    }
    profile_.mem_gbps = kProbe / std::max(best - profile_.sync_us * 1e-6, 1e-9) / 1e9;
    std::memset(host->map, 0, kProbe);
    best = 1e30;
    for (int i = 0; i < 3 && st.ok(); ++i) {
      t0 = seconds_now();
      st = immediate_copy(host->buf, 0, big.buf, 0, kProbe);
      best = std::min(best, seconds_now() - t0);
    }
    profile_.link_gbps = kProbe / std::max(best - profile_.sync_us * 1e-6, 1e-9) / 1e9;
  }
  if (st.ok()) st = wait_all();
  destroy_buffer(big);
  if (sink.ok()) destroy_buffer(*sink);
  if (host.ok()) destroy_buffer(*host);
  HC_TRY(st.with_context("measuring the device profile"));
  if (!(profile_.mem_gbps > 0 && profile_.link_gbps > 0 && profile_.sync_us > 0))
    return Status::Error("measuring the device profile: got memory " +
                         std::to_string(profile_.mem_gbps) + " GB/s, link " +
                         std::to_string(profile_.link_gbps) + " GB/s, sync " +
                         std::to_string(profile_.sync_us) + " us");
  return Status::Ok();
}

void lose_device_for_test(Device& dev) {
  auto* vk = dynamic_cast<VulkanDevice*>(&dev);
  HC_CHECK(vk != nullptr);
  vk->lose_device();
}

void set_ffn_fused_for_test(Device& dev, bool fused) {
  auto* vk = dynamic_cast<VulkanDevice*>(&dev);
  HC_CHECK(vk != nullptr);
  vk->set_ffn_fused(fused);
}

Result<std::vector<uint8_t>> quantized_activations_for_test(Device& dev, GgmlType t,
                                                           const float* x, int64_t n_tok,
                                                           int64_t ne0) {
  auto* vk = dynamic_cast<VulkanDevice*>(&dev);
  HC_CHECK(vk != nullptr);
  return vk->quantized_activations(t, x, n_tok, ne0);
}

Result<std::vector<VulkanDeviceInfo>> vulkan_devices() {
  HC_ASSIGN_OR_RETURN(Instance * in, instance());
  std::vector<VulkanDeviceInfo> out;
  for (int i = 0; i < static_cast<int>(in->phys.size()); ++i) out.push_back(describe(*in, i));
  return out;
}

Result<std::unique_ptr<Device>> open_vulkan_device(const DeviceOptions& opt) {
  return VulkanDevice::open(opt);
}

}  // namespace hc::ops::vk
