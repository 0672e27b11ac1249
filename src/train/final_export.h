// The end of a run that was not stopped: final/ (the HF model, or a LoRA run's PEFT adapter
// folder), or with ZeRO-3 and no 16-bit gather the consolidate command that writes it; then
// the samples of the run config's prompts, from the trained model.
#pragma once
#include <string>
#include <vector>

#include "train/checkpoint_policy.h"

namespace zt {
class FaultInjector;
}  // namespace zt

namespace zt::train {

struct TrainingRun;
class StopSignals;

struct FinalExport {
  std::string model_dir;             // final/ ("" when not written)
  std::vector<std::string> samples;  // the texts generated (a stop signal ends them early)
};

// Collective: every rank gathers, rank 0 writes and samples. `last_checkpoint` is named in
// the consolidate command when final/ is not written.
FinalExport export_final(TrainingRun& run, FinalModel final, const std::string& last_checkpoint,
                         const StopSignals& signals, const FaultInjector& drills);

}  // namespace zt::train
