// Learning-rate schedules: DeepSpeed's (WarmupLR, WarmupDecayLR, WarmupCosineLR,
// OneCycle, LRRangeTest) and HF Trainer's (constant, constant_with_warmup, linear,
// cosine with warmup). A schedule is a pure function of the optimizer step count (the
// number of optimizer steps taken so far), so resuming needs only that count.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace zt::train {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // Learning rate for the update after `step` optimizer steps (step 0 = first update).
  virtual float lr(int64_t step) const = 0;
  virtual std::string describe() const = 0;
};

// From a ds_config "scheduler" block ({"type", "params"}); base_lr is the optimizer's lr
// (used by the ratio-based schedules and as the warmup_max_lr default). `source` names
// the file in errors.
std::unique_ptr<LrSchedule> make_deepspeed_schedule(const nlohmann::json& block, float base_lr,
                                                    const std::string& source);
// HF Trainer lr_scheduler_type: constant, constant_with_warmup, linear, cosine.
std::unique_ptr<LrSchedule> make_hf_schedule(const std::string& type, float base_lr, int64_t warmup_steps,
                                             int64_t total_steps, float min_lr_ratio = 0.0f);

}  // namespace zt::train
