// pipeline::Schedule (pipeline/schedule.h): the instruction lists of the data-parallel,
// GPipe and 1F1B schedules, exactly for small sizes and by their invariants for others:
// every stage runs each micro-batch's forward and backward once, the forward first; the
// backwards in micro-batch order (the last one completes the accumulation); a stage holds
// no more micro-batches than its slots, each in its own slot; what a stage sends in step k
// its neighbour receives in step k + 1; only the first and last stages load; every stage
// ends with ReduceGrads, OptimizerStep.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "pipeline/schedule.h"

using namespace zt;
using namespace zt::pipeline;

namespace {

// One line per step: the step's instructions, "-" for an idle step.
std::vector<std::string> lines(const Schedule& s, int stage) {
  std::vector<std::string> out;
  for (const auto& step : s.steps(stage)) out.push_back(step.empty() ? "-" : to_string(step));
  return out;
}

void check_invariants(const Schedule& s) {
  SCOPED_TRACE(s.name() + " " + std::to_string(s.stages()) + " stages, " + std::to_string(s.micro_batches()) +
               " micro-batches");
  const int S = s.stages(), M = s.micro_batches();
  size_t steps = s.steps(0).size();
  for (int st = 0; st < S; ++st) {
    SCOPED_TRACE("stage " + std::to_string(st));
    const auto& list = s.steps(st);
    ASSERT_EQ(list.size(), steps) << "every stage the same number of steps";
    ASSERT_EQ(to_string(list.back()), "ReduceGrads OptimizerStep");
    std::map<int, int> forward_at, backward_at;
    std::vector<int> backward_order;
    std::map<int, int> slot_of;  // in flight: micro-batch -> slot
    int most_in_flight = 0;
    for (size_t k = 0; k + 1 < list.size(); ++k) {
      int compute = 0;
      for (const Instruction& i : list[k]) {
        ASSERT_GE(i.micro_batch, 0);
        ASSERT_LT(i.micro_batch, M);
        EXPECT_EQ(i.boundary == Boundary::Last, i.micro_batch == M - 1);
        ASSERT_GE(i.slot, 0);
        ASSERT_LT(i.slot, s.slots(st));
        switch (i.op) {
          case Op::Forward:
            ++compute;
            EXPECT_EQ(forward_at.count(i.micro_batch), 0u);
            forward_at[i.micro_batch] = static_cast<int>(k);
            for (const auto& [m, slot] : slot_of) EXPECT_NE(slot, i.slot) << "micro-batch " << m << "'s slot reused";
            slot_of[i.micro_batch] = i.slot;
            most_in_flight = std::max(most_in_flight, static_cast<int>(slot_of.size()));
            break;
          case Op::Backward:
            ++compute;
            ASSERT_EQ(forward_at.count(i.micro_batch), 1u) << "backward before forward";
            EXPECT_EQ(slot_of.at(i.micro_batch), i.slot);
            backward_at[i.micro_batch] = static_cast<int>(k);
            backward_order.push_back(i.micro_batch);
            slot_of.erase(i.micro_batch);
            break;
          case Op::LoadMicroBatch:
            EXPECT_TRUE(st == 0 || st == S - 1) << "a middle stage loads nothing";
            break;
          case Op::SendActivation:
          case Op::RecvGrad:
            EXPECT_LT(st, S - 1);
            break;
          case Op::RecvActivation:
          case Op::SendGrad:
            EXPECT_GT(st, 0);
            break;
          default:
            ADD_FAILURE() << "unexpected " << to_string(i) << " in step " << k;
        }
      }
      EXPECT_LE(compute, 1) << "one forward or backward per step";
    }
    EXPECT_EQ(forward_at.size(), static_cast<size_t>(M));
    EXPECT_EQ(backward_at.size(), static_cast<size_t>(M));
    for (int m = 0; m < M; ++m) EXPECT_EQ(backward_order[static_cast<size_t>(m)], m) << "backwards in order";
    EXPECT_EQ(most_in_flight, s.slots(st)) << "the slots are the most micro-batches in flight";
  }
  // Sends meet receives one step later on the neighbour.
  for (int st = 0; st < S; ++st)
    for (size_t k = 0; k < steps; ++k)
      for (const Instruction& i : s.steps(st)[k]) {
        if (i.op != Op::SendActivation && i.op != Op::SendGrad) continue;
        const int peer = i.op == Op::SendActivation ? st + 1 : st - 1;
        const Op recv = i.op == Op::SendActivation ? Op::RecvActivation : Op::RecvGrad;
        ASSERT_LT(k + 1, steps);
        bool met = false;
        for (const Instruction& r : s.steps(peer)[k + 1]) met |= r.op == recv && r.micro_batch == i.micro_batch;
        EXPECT_TRUE(met) << to_string(i) << " of stage " << st << " in step " << k;
      }
}

}  // namespace

TEST(PipelineSchedule, DataParallelIsTodaysAccumulationLoop) {
  const Schedule s = data_parallel_schedule(3);
  EXPECT_EQ(s.stages(), 1);
  EXPECT_EQ(s.slots(0), 1);
  EXPECT_EQ(lines(s, 0), (std::vector<std::string>{
                             "LoadMicroBatch(m0,s0) Forward(m0,s0) Backward(m0,s0)",
                             "LoadMicroBatch(m1,s0) Forward(m1,s0) Backward(m1,s0)",
                             "LoadMicroBatch(m2,s0,last) Forward(m2,s0,last) Backward(m2,s0,last)",
                             "ReduceGrads OptimizerStep",
                         }));
  const Schedule one = data_parallel_schedule(1);
  EXPECT_EQ(lines(one, 0)[0], "LoadMicroBatch(m0,s0,last) Forward(m0,s0,last) Backward(m0,s0,last)");
}

TEST(PipelineSchedule, GPipeRunsEveryForwardThenEveryBackward) {
  const Schedule s = gpipe_schedule(2, 3);
  EXPECT_EQ(s.slots(0), 3);
  EXPECT_EQ(s.slots(1), 3);
  EXPECT_EQ(lines(s, 0), (std::vector<std::string>{
                             "LoadMicroBatch(m0,s0) Forward(m0,s0) SendActivation(m0,s0)",
                             "LoadMicroBatch(m1,s1) Forward(m1,s1) SendActivation(m1,s1)",
                             "LoadMicroBatch(m2,s2,last) Forward(m2,s2,last) SendActivation(m2,s2,last)",
                             "-",
                             "-",
                             "RecvGrad(m0,s0) Backward(m0,s0)",
                             "RecvGrad(m1,s1) Backward(m1,s1)",
                             "RecvGrad(m2,s2,last) Backward(m2,s2,last)",
                             "ReduceGrads OptimizerStep",
                         }));
  EXPECT_EQ(lines(s, 1), (std::vector<std::string>{
                             "-",
                             "RecvActivation(m0,s0) LoadMicroBatch(m0,s0) Forward(m0,s0)",
                             "RecvActivation(m1,s1) LoadMicroBatch(m1,s1) Forward(m1,s1)",
                             "RecvActivation(m2,s2,last) LoadMicroBatch(m2,s2,last) Forward(m2,s2,last)",
                             "Backward(m0,s0) SendGrad(m0,s0)",
                             "Backward(m1,s1) SendGrad(m1,s1)",
                             "Backward(m2,s2,last) SendGrad(m2,s2,last)",
                             "-",
                             "ReduceGrads OptimizerStep",
                         }));
  for (int S : {1, 2, 3, 4})
    for (int M : {1, 2, 5, 8}) check_invariants(gpipe_schedule(S, M));
}

TEST(PipelineSchedule, OneFOneBAlternatesAfterTheWarmUp) {
  const Schedule s = one_f_one_b_schedule(2, 3);
  EXPECT_EQ(s.slots(0), 2);
  EXPECT_EQ(s.slots(1), 1);
  EXPECT_EQ(lines(s, 0), (std::vector<std::string>{
                             "LoadMicroBatch(m0,s0) Forward(m0,s0) SendActivation(m0,s0)",
                             "-",
                             "LoadMicroBatch(m1,s1) Forward(m1,s1) SendActivation(m1,s1)",
                             "RecvGrad(m0,s0) Backward(m0,s0)",
                             "LoadMicroBatch(m2,s0,last) Forward(m2,s0,last) SendActivation(m2,s0,last)",
                             "RecvGrad(m1,s1) Backward(m1,s1)",
                             "-",
                             "RecvGrad(m2,s0,last) Backward(m2,s0,last)",
                             "ReduceGrads OptimizerStep",
                         }));
  EXPECT_EQ(lines(s, 1), (std::vector<std::string>{
                             "-",
                             "RecvActivation(m0,s0) LoadMicroBatch(m0,s0) Forward(m0,s0)",
                             "Backward(m0,s0) SendGrad(m0,s0)",
                             "RecvActivation(m1,s0) LoadMicroBatch(m1,s0) Forward(m1,s0)",
                             "Backward(m1,s0) SendGrad(m1,s0)",
                             "RecvActivation(m2,s0,last) LoadMicroBatch(m2,s0,last) Forward(m2,s0,last)",
                             "Backward(m2,s0,last) SendGrad(m2,s0,last)",
                             "-",
                             "ReduceGrads OptimizerStep",
                         }));
  for (int S : {1, 2, 3, 4})
    for (int M : {1, 2, 5, 8}) check_invariants(one_f_one_b_schedule(S, M));
  // The activation memory bound that makes 1F1B worth it: stage s holds min(S - s, M).
  const Schedule deep = one_f_one_b_schedule(4, 8);
  for (int st = 0; st < 4; ++st) EXPECT_EQ(deep.slots(st), 4 - st);
}

TEST(PipelineSchedule, RefusesEmptySizes) {
  EXPECT_THROW(data_parallel_schedule(0), Error);
  EXPECT_THROW(gpipe_schedule(0, 2), Error);
  EXPECT_THROW(one_f_one_b_schedule(2, 0), Error);
  EXPECT_THROW(gpipe_schedule(2, 2).steps(2), Error);
}
