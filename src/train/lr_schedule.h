// Learning-rate schedules: DeepSpeed's (WarmupLR, WarmupDecayLR, WarmupCosineLR,
// OneCycle, LRRangeTest) and HF Trainer's (constant, constant_with_warmup, linear,
// cosine with warmup). A schedule is a pure function of the optimizer step count (the
// number of optimizer steps taken so far), so resuming needs only that count.
//
// DeepSpeed's schedulers set the learning rate once when built (last_batch_iteration =
// -1) and step after every optimizer step, so update k (0-based) uses the schedule at
// last_batch_iteration = k - 1. We reproduce that exactly, including its consequences:
// WarmupLR's first two updates both use warmup_min_lr (log(0+1) = 0) and WarmupCosineLR's
// first update uses lr 0. HF's LambdaLR evaluates its lambda at k for update k.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json_fwd.hpp>

namespace zt::train {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // Learning rate for the update after `step` optimizer steps (step 0 = first update).
  virtual float lr(int64_t step) const = 0;
  // (beta1, beta2) for that update when the schedule also drives momentum (DeepSpeed's
  // OneCycle with cycle_momentum, its default), else nullopt. The trainer passes them to
  // Optimizer::set_betas before the step. DeepSpeed sets beta2 to 0.99 while cycling.
  virtual std::optional<std::pair<float, float>> betas(int64_t /*step*/) const { return std::nullopt; }
  virtual std::string describe() const = 0;
};

// Values of the run that resolve "auto" in a scheduler block (HF Trainer's rules:
// warmup_min_lr 0, warmup_max_lr = the optimizer lr, total_num_steps = the run's
// optimizer steps, warmup_num_steps = its warmup steps). -1 = unknown: "auto" is then an
// error naming the key.
struct ScheduleRun {
  int64_t total_steps = -1;
  int64_t warmup_steps = -1;
};

// From a ds_config "scheduler" block ({"type", "params"}); base_lr is the optimizer's lr
// (used by the ratio-based schedules and as the warmup_max_lr default). `source` names
// the file in errors. Parameter names and defaults are DeepSpeed's; an unknown parameter,
// a wrong type or an invalid value is an error naming "scheduler.params.<key>".
std::unique_ptr<LrSchedule> make_deepspeed_schedule(const nlohmann::json& block, float base_lr,
                                                    const std::string& source, const ScheduleRun& run = {});
// HF Trainer lr_scheduler_type: constant, constant_with_warmup, linear, cosine (and
// cosine_with_min_lr; min_lr_ratio > 0 turns cosine into it).
std::unique_ptr<LrSchedule> make_hf_schedule(const std::string& type, float base_lr, int64_t warmup_steps,
                                             int64_t total_steps, float min_lr_ratio = 0.0f);

}  // namespace zt::train
