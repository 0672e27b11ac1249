// The evaluator's decisions (train/evaluator.h): when a step evaluates, and HF's best-model
// and early-stopping bookkeeping (EarlyStoppingCallback's patience and threshold).
#include "train/evaluator.h"

#include <gtest/gtest.h>

namespace zt::train {
namespace {

TEST(Evaluator, StepsEvaluateByStrategyAndAtTheLastStep) {
  config::TrainConfig c;
  c.eval_interval = 5;
  EXPECT_TRUE(evaluation_due(c, 7, 10, false));
  EXPECT_FALSE(evaluation_due(c, 7, 7, false));
  EXPECT_TRUE(evaluation_due(c, 7, 12, true));
  c.eval_interval = 0;  // the end only
  EXPECT_FALSE(evaluation_due(c, 7, 10, false));
  EXPECT_TRUE(evaluation_due(c, 7, 10, true));
  c.evaluations = config::Evaluations::Epoch;
  EXPECT_TRUE(evaluation_due(c, 7, 14, false));
  EXPECT_FALSE(evaluation_due(c, 7, 10, false));
  c.evaluations = config::Evaluations::None;
  EXPECT_FALSE(evaluation_due(c, 7, 14, true));
}

TEST(Evaluator, TheBestMetricAndItsStep) {
  BestMetric lower(false, 0, 0.0);
  EXPECT_FALSE(lower.has_best());
  EXPECT_EQ(lower.best_step(), -1);
  lower.observe(3.0, 10);
  lower.observe(2.0, 20);
  lower.observe(2.5, 30);
  EXPECT_EQ(lower.best(), 2.0);
  EXPECT_EQ(lower.best_step(), 20);
  EXPECT_EQ(lower.evals_without_improvement(), 1);
  EXPECT_FALSE(lower.patience_exhausted());  // patience 0: never
  BestMetric greater(true, 0, 0.0);
  greater.observe(3.0, 10);
  greater.observe(2.0, 20);
  EXPECT_EQ(greater.best(), 3.0);
  EXPECT_EQ(greater.best_step(), 10);
}

TEST(Evaluator, PatienceCountsEvaluationsWithoutAnImprovementAboveTheThreshold) {
  BestMetric m(false, 2, 0.1);
  m.observe(3.0, 1);
  m.observe(2.95, 2);  // better, but by less than the threshold: the best moves, the count grows
  EXPECT_EQ(m.best_step(), 2);
  EXPECT_EQ(m.evals_without_improvement(), 1);
  EXPECT_FALSE(m.patience_exhausted());
  m.observe(2.5, 3);  // an improvement: the count starts again
  EXPECT_EQ(m.evals_without_improvement(), 0);
  m.observe(2.6, 4);
  EXPECT_FALSE(m.patience_exhausted());
  m.observe(2.5, 5);  // equal is no improvement
  EXPECT_TRUE(m.patience_exhausted());
  EXPECT_EQ(m.best_step(), 3);
}

}  // namespace
}  // namespace zt::train
