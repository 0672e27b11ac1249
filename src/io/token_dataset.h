// Token datasets: shards of token ids on disk, read with mmap, and the batch loader.
//
// Shard format (zerotrain .bin): a 64-byte little-endian header
//   magic "ZTTOKENS" (8 bytes), version u32 (1), token bytes u32 (2 = u16, 4 = u32),
//   token count u64, vocab size u64, eos id i64, reserved (24 bytes, zero)
// followed by the ids. Version 2 (supervised fine-tuning data, `prepare` on SFT records)
// uses reserved bytes 40..47 for the sample count S and appends, after the ids, a loss
// mask of one bit per token (LSB first; 1 = the token is a target counted in the loss),
// zero bytes up to a multiple of 8 bytes from the file's start, and S u64 token offsets
// where the samples start (0 first, increasing). Also read: llm.c shards (256 x i32 header, magic 20240520,
// version 1 = u16 tokens) and nanoGPT's raw u16 .bin files (no header).
//
// Windows: a shard of n tokens holds (n - 1) / T windows of T+1 tokens starting at 0, T,
// 2T, ... (consecutive windows share one token, so every token but the first is a target
// exactly once per epoch); windows never cross shard boundaries. In version 2 shards the
// targets whose token is masked are ignore_index (-100), and with
// SampleWindows::PaddedPerSample every sample is a window of its own (cut at T+1 tokens,
// padded; pad targets -100). An epoch visits every
// window of every shard once in a seeded order; the last partial global batch is dropped.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace zt::io {

enum class ShardFormat { Zerotrain, LlmC, RawU16 };

class TokenShard {
 public:
  virtual ~TokenShard() = default;
  virtual int64_t size() const = 0;  // tokens
  virtual int32_t at(int64_t i) const = 0;
  // Copies tokens [start, start + n) into out.
  virtual void read(int64_t start, int64_t n, int32_t* out) const = 0;
  virtual const std::string& path() const = 0;
  virtual ShardFormat format() const = 0;
  virtual int64_t vocab_size() const { return 0; }  // 0: not recorded (llm.c, raw)
  virtual int64_t eos_id() const { return -1; }     // -1: not recorded
  // Version 2 (SFT) shards: the loss mask and the samples' first tokens.
  virtual bool has_loss_mask() const { return false; }
  // Mask of tokens [start, start + n): 1 = a target counted in the loss (all 1 without a mask).
  virtual void read_mask(int64_t start, int64_t n, uint8_t* out) const;
  virtual const std::vector<int64_t>& sample_starts() const;  // empty without samples
};

// Opens one shard (format detected from the header; raw u16 when it has none and the
// name ends in .bin). Throws BadInput naming the file.
std::unique_ptr<TokenShard> open_token_shard(const std::string& path);
// Expands a file, directory (its *.bin files) or glob into shard paths, sorted. Throws
// BadInput when nothing matches.
std::vector<std::string> list_token_shards(const std::string& pattern);

// Writes a zerotrain shard atomically: u16 ids when vocab_size <= 65536, else u32.
// Ids outside [0, vocab_size) are BadInput (naming the index).
void write_token_shard(const std::string& path, const int32_t* ids, int64_t n, int64_t vocab_size, int64_t eos_id);
// A version 2 (SFT) shard: ids, their loss mask (0/1 per token) and the samples' first
// tokens (sample_starts[0] == 0, increasing, < n).
void write_sft_shard(const std::string& path, const int32_t* ids, const uint8_t* mask, int64_t n,
                     const std::vector<int64_t>& sample_starts, int64_t vocab_size, int64_t eos_id);
// The llm.c format (u16 ids; for tests and for llm.c users).
void write_llmc_shard(const std::string& path, const int32_t* ids, int64_t n);

struct LoaderState {
  uint64_t epoch = 0;
  uint64_t position = 0;  // windows consumed in this epoch (global, across ranks)
};

// Yields (B, T+1) windows: inputs [B, T], targets [B, T] shifted by one. The order is a
// seeded shuffle of window starts per epoch, the same for every world size: the global
// batch is (global_batch) consecutive windows of the order and rank r takes windows
// [r*B, (r+1)*B) of it, so ranks see disjoint data and a run resumed at another world
// size continues the same sequence.
// How version 2 (SFT) shards are cut into windows; other shards are always Packed.
enum class SampleWindows {
  PaddedPerSample,  // each sample its own window, padded (HF TRL's packing=False)
  // Windows of T+1 tokens over the samples, each token tagged with its sample (next()'s
  // segment_starts): attention stays inside each sample and positions restart at each sample
  // start (HF's packing with position_ids / TRL's padding_free); the target of a sample's
  // last token (the next sample's first) is ignored.
  Packed,
};

// The windows of seq_len + 1 tokens the shards make (what a BatchLoader over them gives as
// windows_per_epoch()), without a loader's batch-size check: 0 when they hold less than one
// window. Throws BadInput when a shard is malformed.
int64_t count_windows(const std::vector<std::string>& shard_paths, int64_t seq_len, SampleWindows sample_windows);

class BatchLoader {
 public:
  // Throws BadInput when a shard is malformed or the data has fewer windows than one
  // global batch (micro_batch * world_size) needs.
  BatchLoader(std::vector<std::string> shard_paths, int64_t micro_batch, int64_t seq_len, uint64_t seed, int rank = 0,
              int world_size = 1, SampleWindows sample_windows = SampleWindows::PaddedPerSample);
  ~BatchLoader();
  // Fills tokens and targets (i32, [B, T] each) with the next micro-batch of this rank.
  void next(const Tensor& tokens, const Tensor& targets);
  // The same, and segment_starts (host i32 [B, T]): for each input token the window position
  // of its sample's first token (model::Transformer::forward's argument). Zeros for windows
  // that hold one sequence (plain text, a padded sample).
  void next(const Tensor& tokens, const Tensor& targets, const Tensor& segment_starts);
  // True when some window packs several SFT samples (SampleWindows::Packed on SFT shards):
  // the model then needs next()'s segment_starts.
  bool packs_samples() const;
  LoaderState state() const;
  // Continues from `state` (taken at any world size with the same global batch). BadInput
  // when the position lies past the epoch.
  void restore(const LoaderState& state);
  int64_t windows_per_epoch() const;
  int64_t steps_per_epoch() const;  // global batches per epoch
  // SFT shards: their samples, and those longer than T+1 tokens (cut) when padded per sample.
  int64_t samples() const;
  int64_t truncated_samples() const;
  // Ids >= vocab_size (or negative) in a batch are BadInput naming the shard and offset,
  // instead of indexing past the embedding (data tokenized for another model).
  void set_vocab_size(int64_t vocab_size);
  // (shard index, first token) of window w of the current epoch's order (for tests).
  std::pair<int64_t, int64_t> window(int64_t w) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt::io
