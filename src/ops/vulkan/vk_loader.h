// The Vulkan loader, opened at run time (dlopen "libvulkan.so.1"): hotcold links no Vulkan
// library, so a machine without one runs everything else and reports the backend unavailable.
// The function table holds the entry points VulkanDevice uses; instance- and device-level ones
// are resolved through vkGetInstanceProcAddr / vkGetDeviceProcAddr after creation.
#pragma once
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

#include "core/status.h"

namespace hc::ops::vk {

#define HC_VK_GLOBAL_FNS(X) \
  X(vkCreateInstance)       \
  X(vkEnumerateInstanceVersion)

#define HC_VK_INSTANCE_FNS(X)                 \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkCreateDevice)                           \
  X(vkGetDeviceProcAddr)

#define HC_VK_DEVICE_FNS(X)          \
  X(vkDestroyDevice)                 \
  X(vkGetDeviceQueue)                \
  X(vkCreateBuffer)                  \
  X(vkDestroyBuffer)                 \
  X(vkGetBufferMemoryRequirements)   \
  X(vkAllocateMemory)                \
  X(vkFreeMemory)                    \
  X(vkBindBufferMemory)              \
  X(vkMapMemory)                     \
  X(vkUnmapMemory)                   \
  X(vkGetBufferDeviceAddress)        \
  X(vkCreateCommandPool)             \
  X(vkDestroyCommandPool)            \
  X(vkAllocateCommandBuffers)        \
  X(vkFreeCommandBuffers)            \
  X(vkResetCommandBuffer)            \
  X(vkBeginCommandBuffer)            \
  X(vkEndCommandBuffer)              \
  X(vkCmdCopyBuffer)                 \
  X(vkCmdFillBuffer)                 \
  X(vkCmdPipelineBarrier)            \
  X(vkCmdBindPipeline)               \
  X(vkCmdPushConstants)              \
  X(vkCmdDispatch)                   \
  X(vkQueueSubmit)                   \
  X(vkCreateSemaphore)               \
  X(vkDestroySemaphore)              \
  X(vkWaitSemaphores)                \
  X(vkGetSemaphoreCounterValue)      \
  X(vkCreateShaderModule)            \
  X(vkDestroyShaderModule)           \
  X(vkCreatePipelineLayout)          \
  X(vkDestroyPipelineLayout)         \
  X(vkCreateComputePipelines)        \
  X(vkDestroyPipeline)               \
  X(vkDeviceWaitIdle)

struct Fns {
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
#define HC_VK_DECLARE(name) PFN_##name name = nullptr;
  HC_VK_GLOBAL_FNS(HC_VK_DECLARE)
  HC_VK_INSTANCE_FNS(HC_VK_DECLARE)
  HC_VK_DEVICE_FNS(HC_VK_DECLARE)
#undef HC_VK_DECLARE
};

// The process-wide table with its global functions resolved (the loader is opened once and
// stays loaded), or an error naming what is missing.
Result<Fns*> load_vulkan();
// Fills the instance-level (then device-level) entries of `f`; an error names a missing one.
Status load_instance_fns(Fns& f, VkInstance instance);
Status load_device_fns(Fns& f, VkDevice device);

// "VK_ERROR_DEVICE_LOST" etc.
const char* vk_result_name(VkResult r);

}  // namespace hc::ops::vk
