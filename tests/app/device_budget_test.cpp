// The structural budgets of a decode step (device_budgets.h) on the CPU device.
#include <gtest/gtest.h>

#include "device_budgets.h"

namespace hc {
namespace {

TEST(DeviceBudgets, DecodeStepsStayWithinTheirSyncsAndBytesOnTheCpuDevice) {
  test::check_decode_budgets("cpu");
}

TEST(DeviceBudgets, PredictorsRunWhereTheAttentionRunsOnTheCpuDevice) {
  test::check_predictor_budgets("cpu");
}

TEST(DeviceBudgets, ExpertsRouteOnTheCpuDeviceWhenAllAreThere) {
  test::check_moe_budgets("cpu");
}

}  // namespace
}  // namespace hc
