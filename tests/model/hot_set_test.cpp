// hot_set: the fewest most-frequent neurons covering a mass of the firings (ties to the lower
// index), and jaccard of two such sets.
#include "model/hot_set.h"

#include <gtest/gtest.h>

namespace hc {
namespace {

TEST(HotSet, FewestMostFrequentNeuronsCoveringTheMass) {
  // Total 20: 80% is 16 = 8 (neuron 3) + 5 (neuron 0) + 3 (neuron 4).
  const std::vector<float> c = {5, 1, 0, 8, 3, 2, 1};
  EXPECT_EQ(hot_set(c, 0.8), (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(hot_set(c, 0.4), (std::vector<int32_t>{3}));         // 8 >= 8
  EXPECT_EQ(hot_set(c, 0.41), (std::vector<int32_t>{0, 3}));     // 8 < 8.2
  EXPECT_EQ(hot_set(c, 1.0), (std::vector<int32_t>{0, 1, 3, 4, 5, 6}));  // never the silent one
  EXPECT_EQ(hot_set(c, 2.0), hot_set(c, 1.0));
  EXPECT_TRUE(hot_set(c, 0.0).empty());
  EXPECT_TRUE(hot_set(std::vector<float>{0, 0, 0}, 0.8).empty());
  // Integer counts (ActStats's, behind neurons_covering) give the same sets.
  const std::vector<uint64_t> u = {5, 1, 0, 8, 3, 2, 1};
  EXPECT_EQ(hot_set(u, 0.8), hot_set(c, 0.8));
  EXPECT_EQ(hot_set(u, 0.41), hot_set(c, 0.41));
}

TEST(HotSet, TiesGoToTheLowerIndex) {
  const std::vector<float> c = {2, 4, 2, 2, 4};
  // 4 + 4 = 8 of 14 < 0.8 * 14 = 11.2; then the 2s in index order: 0, then 2.
  EXPECT_EQ(hot_set(c, 0.8), (std::vector<int32_t>{0, 1, 2, 4}));
  EXPECT_EQ(hot_set(c, 0.2), (std::vector<int32_t>{1}));
}

TEST(HotSet, Jaccard) {
  EXPECT_DOUBLE_EQ(jaccard({1, 2, 3}, {1, 2, 3}), 1.0);
  EXPECT_DOUBLE_EQ(jaccard({1, 2, 3}, {4, 5}), 0.0);
  EXPECT_DOUBLE_EQ(jaccard({1, 2, 3, 4}, {3, 4, 5, 6}), 2.0 / 6.0);
  EXPECT_DOUBLE_EQ(jaccard({0, 7}, {7}), 0.5);
  EXPECT_DOUBLE_EQ(jaccard({}, {2}), 0.0);
  EXPECT_DOUBLE_EQ(jaccard({}, {}), 1.0);
}

}  // namespace
}  // namespace hc
