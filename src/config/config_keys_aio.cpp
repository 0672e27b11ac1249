// The "aio" table (top level; NVMe offload I/O). Its keys are kept for the engine's NVMe
// offload; the section as a whole warns when set (inert_keys.cpp): that offload is not
// implemented yet.
#include <climits>

#include "config/config_keys.h"

namespace zt::config {

namespace {

using A = AioSection;

AioKey resolved(std::string key, std::vector<std::string> aliases, KeyType type, double dflt, std::string dflt_text,
                KeyField<A> target, std::string doc) {
  return key_row<A>(std::move(key), std::move(aliases), type, dflt, std::move(dflt_text),
                    type == KeyType::Int ? 1 : kNoMinimum, AutoRule::None, KeyStatus::Resolved, target, std::move(doc));
}

std::vector<AioKey> make_table() {
  const auto B = KeyType::Bool;
  const auto I = KeyType::Int;
  AioKey use_gds = key_row<A>("use_gds", {}, B, 0, "false", kNoMinimum, AutoRule::None, KeyStatus::Refused, &A::use_gds,
                              "refused when true (GPUDirect Storage)");
  use_gds.refuse_above = 0;
  use_gds.refused_what =
      "GPUDirect Storage is not supported by zerotrain; set use_gds false (NVMe I/O goes through pinned host memory)";
  // The bounds keep queue_depth x intra_op_parallelism (the ring's entries, the thread
  // engine's pool) far inside an int, and a block (one aligned host buffer per piece in
  // flight) under a GiB; DeepSpeed's own values are 1 MiB, 8-128 and 1-8.
  return {
      at_most(resolved("block_size", {}, I, 1048576, "1048576", &A::block_size,
                       "resolved: bytes per I/O piece of NVMe offload's swaps (the section warns when set without "
                       "NVMe offload)"),
              1 << 30, "1 GiB: each piece in flight is an aligned host buffer of this size"),
      at_most(resolved("queue_depth", {}, I, 8, "8", &A::queue_depth, "resolved: pieces in flight per thread"), 65536,
              "io_uring rings hold at most 32768 entries"),
      at_most(resolved("intra_op_parallelism", {"thread_count"}, I, 1, "1", &A::intra_op_parallelism,
                       "resolved: io_uring's ring holds queue_depth x this; the thread engine runs that many threads; "
                       "both names at once is an error"),
              1024, "threads per process"),
      resolved("single_submit", {}, B, 0, "false", &A::single_submit, "resolved: submit pieces one at a time"),
      resolved("overlap_events", {}, B, 1, "true", &A::overlap_events, "resolved: reap completions while submitting"),
      use_gds,
  };
}

}  // namespace

const std::vector<AioKey>& aio_keys() {
  static const std::vector<AioKey> table = make_table();
  return table;
}

}  // namespace zt::config
