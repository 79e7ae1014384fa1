// The structural budgets of a decode step (tests/app/device_budgets.h) on the Vulkan device
// (lavapipe on CI).
#include <gtest/gtest.h>

#include "../app/device_budgets.h"
#include "vulkan_test_util.h"

namespace hc {
namespace {

TEST(VulkanBudgets, DecodeStepsStayWithinTheirSyncsAndBytes) {
  REQUIRE_VULKAN();
  test::check_decode_budgets("vulkan:0");
}

TEST(VulkanBudgets, PredictorsRunWhereTheAttentionRunsThere) {
  REQUIRE_VULKAN();
  test::check_predictor_budgets("vulkan:0");
}

TEST(VulkanBudgets, ExpertsRouteThereWhenAllAreThere) {
  REQUIRE_VULKAN();
  test::check_moe_budgets("vulkan:0");
}

}  // namespace
}  // namespace hc
