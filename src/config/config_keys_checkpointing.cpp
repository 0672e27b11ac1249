// The activation_checkpointing table. The block's presence turns recomputation of every
// block on (resolve_ds_config); its options are DeepSpeed's knobs for how, which
// zerotrain's per-block checkpoints decide already: each one switched on warns.
#include <climits>

#include "config/config_keys.h"

namespace zt::config {

namespace {

using A = ActivationCheckpointingSection;

CheckpointingKey accepted(std::string key, KeyType type, std::string dflt_text, KeyField<A> target, std::string why,
                          std::string doc) {
  CheckpointingKey k =
      key_row<A>(std::move(key), {}, type, 0, std::move(dflt_text), type == KeyType::Int ? 0 : kNoMinimum,
                 AutoRule::None, KeyStatus::Accepted, target, std::move(doc));
  k.inert_when = InertWhen::NotDefault;
  k.inert_why = std::move(why);
  return k;
}

std::vector<CheckpointingKey> make_table() {
  const auto B = KeyType::Bool;
  return {
      accepted("partition_activations", B, "false", &A::partition_activations,
               "it splits activations over tensor-parallel ranks", "accepted (meaningful with tensor parallelism)"),
      accepted("cpu_checkpointing", B, "false", &A::cpu_checkpointing, "checkpointed activations stay on the device",
               "accepted: checkpointed activations stay on the device"),
      accepted("contiguous_memory_optimization", B, "false", &A::contiguous_memory_optimization,
               "checkpointed activations already live in one buffer", "accepted: they already live in one buffer"),
      accepted("number_checkpoints", KeyType::Int, "not set", &A::number_checkpoints, "every block is a checkpoint",
               "accepted: every block is a checkpoint"),
      accepted("synchronize_checkpoint_boundary", B, "false", &A::synchronize_checkpoint_boundary,
               "no device sync is needed", "accepted"),
      accepted("profile", B, "false", &A::profile, "use wall_clock_breakdown for the forward/backward times",
               "accepted (use `wall_clock_breakdown`)"),
  };
}

}  // namespace

const std::vector<CheckpointingKey>& checkpointing_keys() {
  static const std::vector<CheckpointingKey> table = make_table();
  return table;
}

}  // namespace zt::config
