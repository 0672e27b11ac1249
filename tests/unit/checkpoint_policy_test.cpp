// The checkpoint policy's decisions (train/checkpoint_policy.h): which steps save under
// save_strategy, and when a run ends with final/ or with its checkpoint only.
#include "train/checkpoint_policy.h"

#include <gtest/gtest.h>

namespace zt::train {
namespace {

TEST(CheckpointPolicy, StepsSaveByStrategyAndAtTheLastStep) {
  config::TrainConfig c;
  c.save_interval = 4;
  const FinalModel w = FinalModel::Written;
  EXPECT_TRUE(save_due(c, 10, w, 8, false));
  EXPECT_FALSE(save_due(c, 10, w, 6, false));
  EXPECT_TRUE(save_due(c, 10, w, 9, true));
  c.save_interval = 0;  // the end only
  EXPECT_FALSE(save_due(c, 10, w, 8, false));
  EXPECT_TRUE(save_due(c, 10, w, 8, true));
  c.checkpoint_saves = config::CheckpointSaves::Epoch;
  EXPECT_TRUE(save_due(c, 10, w, 20, false));
  EXPECT_FALSE(save_due(c, 10, w, 8, false));
  c.checkpoint_saves = config::CheckpointSaves::None;
  EXPECT_FALSE(save_due(c, 10, w, 20, true));
  // No final/: the last step's checkpoint is the result, even with save_strategy no.
  EXPECT_TRUE(save_due(c, 10, FinalModel::CheckpointOnly, 20, true));
  EXPECT_FALSE(save_due(c, 10, FinalModel::CheckpointOnly, 10, false));
}

TEST(CheckpointPolicy, OnlyZero3OverSeveralRanksWithoutTheGatherSkipsFinal) {
  EXPECT_EQ(final_model(3, 2, false, false), FinalModel::CheckpointOnly);
  EXPECT_EQ(final_model(3, 2, true, false), FinalModel::Written);   // stage3_gather_16bit_weights_on_model_save
  EXPECT_EQ(final_model(3, 2, false, true), FinalModel::Written);   // a LoRA adapter is small
  EXPECT_EQ(final_model(3, 1, false, false), FinalModel::Written);  // one rank holds everything
  EXPECT_EQ(final_model(2, 4, false, false), FinalModel::Written);
}

}  // namespace
}  // namespace zt::train
