// Token datasets: shards of token ids on disk, read with mmap, and the batch loader.
//
// Shard format (zerotrain .bin): a 64-byte little-endian header
//   magic "ZTTOKENS" (8 bytes), version u32 (1), token bytes u32 (2 = u16, 4 = u32),
//   token count u64, vocab size u64, eos id i64, reserved (24 bytes, zero)
// followed by the ids. Also read: llm.c shards (256 x i32 header, magic 20240520,
// version 1 = u16 tokens) and nanoGPT's raw u16 .bin files (no header).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace zt::io {

class TokenShard {
 public:
  virtual ~TokenShard() = default;
  virtual int64_t size() const = 0;                 // tokens
  virtual int32_t at(int64_t i) const = 0;
  // Copies tokens [start, start + n) into out.
  virtual void read(int64_t start, int64_t n, int32_t* out) const = 0;
  virtual const std::string& path() const = 0;
};

// Opens one shard (format detected from the header; raw u16 when it has none and the
// name ends in .bin). Throws BadInput naming the file.
std::unique_ptr<TokenShard> open_token_shard(const std::string& path);
// Expands a file, directory or glob into shard paths, sorted.
std::vector<std::string> list_token_shards(const std::string& pattern);

struct LoaderState {
  uint64_t epoch = 0;
  uint64_t position = 0;  // windows consumed in this epoch (global, across ranks)
};

// Yields (B, T+1) windows: inputs [B, T], targets [B, T] shifted by one. The order is a
// seeded shuffle of window starts per epoch, the same for every world size: the global
// batch is (global_batch) consecutive windows of the order and rank r takes windows
// [r*B, (r+1)*B) of it, so ranks see disjoint data and a run resumed at another world
// size continues the same sequence.
class BatchLoader {
 public:
  BatchLoader(std::vector<std::string> shard_paths, int64_t micro_batch, int64_t seq_len, uint64_t seed, int rank = 0,
              int world_size = 1);
  ~BatchLoader();
  // Fills tokens and targets (i32, [B, T] each) with the next micro-batch of this rank.
  void next(const Tensor& tokens, const Tensor& targets);
  LoaderState state() const;
  void restore(const LoaderState& state);
  int64_t windows_per_epoch() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt::io
