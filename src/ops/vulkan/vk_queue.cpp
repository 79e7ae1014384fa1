// VulkanDevice's queue (vk_device_impl.h; the design notes are vk_device.cpp's "Queue"): one
// command buffer recording at a time, submitted on copy_to_host, sync() or every kFlushOps
// operations; a timeline semaphore counts submissions. Recorded steps (ops::Device's
// begin_record / end_record / replay) are command buffers kept and submitted again.
#include <cstring>

#include "ops/vulkan/vk_device_impl.h"

namespace hc::ops::vk {

// ---- queue --------------------------------------------------------------------------------

void VulkanDevice::fail(const std::string& op, const std::string& msg) {
  if (first_error_.empty()) first_error_ = op + ": " + msg;
}

bool VulkanDevice::usable(const char* op) {
  if (lost_.empty()) return true;
  fail(op, "device lost: " + lost_);
  return false;
}

VkCommandBuffer VulkanDevice::record() {
  if (!lost_.empty()) return VK_NULL_HANDLE;
  if (!cur_) {
    if (!free_cbs_.empty()) {
      cur_ = free_cbs_.back();
      free_cbs_.pop_back();
      f_->vkResetCommandBuffer(cur_, 0);
    } else {
      VkCommandBufferAllocateInfo ai = vk_struct<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
      ai.commandPool = pool_;
      ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
      ai.commandBufferCount = 1;
      if (VkResult r = f_->vkAllocateCommandBuffers(dev_, &ai, &cur_); r != VK_SUCCESS) {
        fail("queue", std::string("vkAllocateCommandBuffers failed: ") + vk_result_name(r));
        cur_ = VK_NULL_HANDLE;
        return VK_NULL_HANDLE;
      }
    }
    VkCommandBufferBeginInfo bi = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    // A recorded step is submitted again, maybe while an earlier replay still runs.
    bi.flags = recording_ ? VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT
                          : VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    f_->vkBeginCommandBuffer(cur_, &bi);
    cur_ops_ = 0;
  }
  // In order: every earlier write (shader or transfer) is visible to what comes next.
  VkMemoryBarrier mb = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkPipelineStageFlags stages =
      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  f_->vkCmdPipelineBarrier(cur_, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
  ++cur_ops_;
  ++ops_recorded_;
  count_ops();
  return cur_;
}

Result<VkCommandBuffer> VulkanDevice::end_current() {
  // The host reads what the queue wrote (mapped buffers) after waiting.
  VkMemoryBarrier mb = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  f_->vkCmdPipelineBarrier(cur_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                           VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
  VkCommandBuffer cb = cur_;
  cur_ = VK_NULL_HANDLE;
  HC_TRY(vk_error(f_->vkEndCommandBuffer(cb), "vkEndCommandBuffer"));
  return cb;
}

Status VulkanDevice::flush() {
  if (!cur_ || recording_) return Status::Ok();
  VkCommandBuffer cb = cur_;
  in_flight_.push_back(cb);  // recycled at the next wait, whatever happens below
  HC_TRY(end_current().status());
  return submit(cb);
}

Status VulkanDevice::submit(VkCommandBuffer cb) {
  const uint64_t value = submitted_ + 1;
  VkTimelineSemaphoreSubmitInfo ts = vk_struct<VkTimelineSemaphoreSubmitInfo>(VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO);
  ts.signalSemaphoreValueCount = 1;
  ts.pSignalSemaphoreValues = &value;
  VkSubmitInfo si = vk_struct<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
  si.pNext = &ts;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  si.signalSemaphoreCount = 1;
  si.pSignalSemaphores = &timeline_;
  const VkResult r = f_->vkQueueSubmit(queue_, 1, &si, VK_NULL_HANDLE);
  if (r != VK_SUCCESS) {
    if (r == VK_ERROR_DEVICE_LOST) lost_ = vk_result_name(r);
    return Status::Error(std::string("vkQueueSubmit failed: ") + vk_result_name(r));
  }
  submitted_ = value;
  return Status::Ok();
}

Status VulkanDevice::wait_all() {
  if (!lost_.empty()) return Status::Error("device lost: " + lost_);
  if (recording_) {
    // A wait inside a step being recorded (a sync, an upload, scratch that grew): what was
    // recorded runs now, as an ordinary submission, and the step is not kept.
    not_replayable("the host waited for the queue (a sync, an upload or download, or scratch "
                   "that had to grow) while the step was recorded");
    recording_ = false;
  }
  HC_TRY(flush());
  count_sync();
  if (submitted_ > 0) {
    VkSemaphoreWaitInfo wi = vk_struct<VkSemaphoreWaitInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO);
    wi.semaphoreCount = 1;
    wi.pSemaphores = &timeline_;
    wi.pValues = &submitted_;
    const VkResult r = f_->vkWaitSemaphores(dev_, &wi, kWaitNs);
    if (r == VK_ERROR_DEVICE_LOST) lost_ = vk_result_name(r);
    if (r == VK_TIMEOUT)
      return Status::Error("the queue did not finish within " + std::to_string(kWaitNs / 1000000000) +
                           " s (vkWaitSemaphores: VK_TIMEOUT)");
    HC_TRY(vk_error(r, "vkWaitSemaphores"));
  }
  for (VkCommandBuffer cb : in_flight_) free_cbs_.push_back(cb);
  in_flight_.clear();
  return Status::Ok();
}

Status VulkanDevice::sync() {
  Status st = wait_all();
  if (st.ok()) {
    for (const HostCopy& c : deferred_) std::memcpy(c.dst, c.src, c.bytes);
  } else if (!lost_.empty()) {
    st = Status::Error("vulkan device: device lost (" + lost_ + "); its results are gone: " +
                       st.message());
  }
  deferred_.clear();
  staging_chunk_ = 0;
  staging_used_ = 0;
  if (st.ok() && !first_error_.empty()) st = Status::Error("vulkan device: " + first_error_);
  first_error_.clear();
  return st;
}

// ---- recorded steps -------------------------------------------------------------------------

void VulkanDevice::begin_record() {
  if (!usable("begin_record")) return;
  if (Status st = flush(); !st.ok()) fail("begin_record", st.message());  // what came before
  recording_ = true;
  record_error_.clear();
  mark_record();
  if (profile_ops_) not_replayable("HC_VK_PROFILE waits for every dispatch");
  xq_key_ = XqKey();  // the step quantises its own activations: a replay has no earlier ones
}

Result<int> VulkanDevice::end_record() {
  const bool kept = recording_ && cur_ != VK_NULL_HANDLE;
  if (!record_error_.empty() || !kept) {
    const std::string why = !record_error_.empty() ? record_error_
                            : recording_         ? std::string("nothing was queued")
                                                 : std::string("begin_record was not called");
    recording_ = false;
    record_error_.clear();
    if (Status st = flush(); !st.ok()) fail("end_record", st.message());
    return Status::Error("vulkan device: cannot replay the recording: " + why);
  }
  recording_ = false;
  xq_key_ = XqKey();
  HC_ASSIGN_OR_RETURN(VkCommandBuffer cb, end_current());
  int id = 0;
  while (recordings_.count(id)) ++id;
  recordings_[id] = {cb, recorded_bytes()};
  HC_TRY(submit(cb));  // this step's run
  return id;
}

void VulkanDevice::replay(int id, bool step) {
  if (!usable("replay")) return;
  auto it = recordings_.find(id);
  if (it == recordings_.end()) return fail("replay", "no recording " + std::to_string(id));
  if (Status st = flush(); !st.ok()) return fail("replay", st.message());  // in order
  if (Status st = submit(it->second.cb); !st.ok()) return fail("replay", st.message());
  xq_key_ = XqKey();
  count_replay(it->second.bytes, step);
}

void VulkanDevice::drop_record(int id) {
  auto it = recordings_.find(id);
  if (it == recordings_.end()) return;
  (void)wait_all();  // a replay may be running it
  f_->vkFreeCommandBuffers(dev_, pool_, 1, &it->second.cb);
  recordings_.erase(it);
}

}  // namespace hc::ops::vk
