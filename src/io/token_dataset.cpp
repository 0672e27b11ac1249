#include "io/token_dataset.h"
#include "core/strings.h"

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "core/rng.h"
#include "io/mmap.h"
#include "io/safetensors.h"

namespace zt::io {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'Z', 'T', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr uint64_t kHeaderBytes = 64;
constexpr int32_t kLlmcMagic = 20240520;
constexpr uint64_t kLlmcHeaderBytes = 256 * 4;
// A target the loss ignores: model::kIgnoreIndex, HF's ignore_index (-100).
constexpr int32_t kIgnoreTarget = -100;

uint32_t le32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }
uint64_t le64(const uint8_t* p) { return le32(p) | (static_cast<uint64_t>(le32(p + 4)) << 32); }
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// A mapped shard: `width`-byte little-endian ids starting at `offset`.
class MappedShard final : public TokenShard {
 public:
  MappedShard(MappedFile file, ShardFormat format, uint64_t offset, int width, int64_t count, int64_t vocab,
              int64_t eos, uint64_t mask_offset = 0, std::vector<int64_t> samples = {})
      : file_(std::move(file)),
        format_(format),
        offset_(offset),
        width_(width),
        count_(count),
        vocab_(vocab),
        eos_(eos),
        mask_offset_(mask_offset),
        samples_(std::move(samples)) {}
  bool has_loss_mask() const override { return mask_offset_ != 0; }
  void read_mask(int64_t start, int64_t n, uint8_t* out) const override {
    if (!mask_offset_) return TokenShard::read_mask(start, n, out);
    ZT_CHECK(start >= 0 && n >= 0 && start + n <= count_, file_.path(), ": mask [", start, ", ", start + n,
             ") out of range");
    const uint8_t* m = file_.data() + mask_offset_;
    for (int64_t i = 0; i < n; ++i) out[i] = (m[(start + i) >> 3] >> ((start + i) & 7)) & 1;
  }
  const std::vector<int64_t>& sample_starts() const override { return samples_; }
  int64_t size() const override { return count_; }
  int32_t at(int64_t i) const override {
    ZT_CHECK(i >= 0 && i < count_, file_.path(), ": token ", i, " out of range [0, ", count_, ")");
    int32_t v;
    read(i, 1, &v);
    return v;
  }
  void read(int64_t start, int64_t n, int32_t* out) const override {
    ZT_CHECK(start >= 0 && n >= 0 && start + n <= count_, file_.path(), ": tokens [", start, ", ", start + n,
             ") out of range [0, ", count_, ")");
    const uint8_t* p = file_.data() + offset_ + static_cast<uint64_t>(start) * width_;
    if (width_ == 2) {
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(p[2 * i] | (p[2 * i + 1] << 8));
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t v = le32(p + 4 * i);
        if (v > static_cast<uint32_t>(INT32_MAX))
          ZT_THROW_INPUT(file_.path(), ": token ", start + i, " has id ", v,
                         ", beyond the int32 range (corrupt shard)");
        out[i] = static_cast<int32_t>(v);
      }
    }
  }
  const std::string& path() const override { return file_.path(); }
  ShardFormat format() const override { return format_; }
  int64_t vocab_size() const override { return vocab_; }
  int64_t eos_id() const override { return eos_; }

 private:
  MappedFile file_;
  ShardFormat format_;
  uint64_t offset_;
  int width_;
  int64_t count_;
  int64_t vocab_;
  int64_t eos_;
  uint64_t mask_offset_;  // 0: no mask
  std::vector<int64_t> samples_;
};

// Version 2's layout after the ids: the mask bitmap, zero padding to 8 bytes, the samples.
uint64_t v2_samples_offset(uint64_t count, int width) {
  const uint64_t mask_end = kHeaderBytes + count * static_cast<uint64_t>(width) + (count + 7) / 8;
  return (mask_end + 7) / 8 * 8;
}

constexpr const char* kFormats =
    "expected a zerotrain shard (ZTTOKENS header; `zerotrain prepare` writes them), an llm.c shard (magic "
    "20240520) or a raw uint16 nanoGPT .bin";

}  // namespace

std::unique_ptr<TokenShard> open_token_shard(const std::string& path) {
  MappedFile file(path);
  const uint64_t size = file.size();
  const uint8_t* d = file.data();
  if (size == 0) ZT_THROW_INPUT(path, ": empty token shard (0 bytes); re-create it with `zerotrain prepare`");
  if (size >= 8 && std::memcmp(d, kMagic, 8) == 0) {
    if (size < kHeaderBytes)
      ZT_THROW_INPUT(path, ": truncated zerotrain shard header (", size, " of ", kHeaderBytes, " bytes)");
    const uint32_t version = le32(d + 8), width = le32(d + 12);
    const uint64_t count = le64(d + 16), vocab = le64(d + 24);
    const int64_t eos = static_cast<int64_t>(le64(d + 32));
    if (version != 1 && version != 2)
      ZT_THROW_UNSUPPORTED(path, ": zerotrain shard version ", version,
                           " is not supported (this build reads versions 1 and 2; re-create it with `zerotrain "
                           "prepare`)");
    if (width != 2 && width != 4)
      ZT_THROW_INPUT(path, ": corrupt zerotrain shard header: token width ", width, " bytes (must be 2 or 4)");
    if (version == 2) {
      const uint64_t samples = le64(d + 40);
      const uint64_t max_count = (size - kHeaderBytes) / width;
      if (count > max_count || samples > count || samples > size / 8)
        ZT_THROW_INPUT(path, ": corrupt SFT shard header (", count, " tokens, ", samples, " samples in ", size,
                       " bytes); re-create it with `zerotrain prepare`");
      const uint64_t at = v2_samples_offset(count, static_cast<int>(width));
      if (at + samples * 8 != size)
        ZT_THROW_INPUT(path, ": an SFT shard of ", count, " tokens and ", samples, " samples takes ", at + samples * 8,
                       " bytes but the file holds ", size,
                       ": the shard is truncated or corrupt; re-create it with `zerotrain prepare`");
      std::vector<int64_t> starts(static_cast<size_t>(samples));
      for (uint64_t i = 0; i < samples; ++i) {
        const uint64_t v = le64(d + at + 8 * i);
        if ((i == 0 && v != 0) || v >= count || (i > 0 && static_cast<int64_t>(v) <= starts[i - 1]))
          ZT_THROW_INPUT(path, ": sample ", i, " starts at token ", v,
                         " (samples must start at 0 and increase within the shard's ", count,
                         " tokens): corrupt shard; re-create it with `zerotrain prepare`");
        starts[i] = static_cast<int64_t>(v);
      }
      if (count > 0 && samples == 0) ZT_THROW_INPUT(path, ": an SFT shard with tokens but no samples (corrupt)");
      return std::make_unique<MappedShard>(
          std::move(file), ShardFormat::Zerotrain, kHeaderBytes, static_cast<int>(width), static_cast<int64_t>(count),
          static_cast<int64_t>(vocab), eos, kHeaderBytes + count * width, std::move(starts));
    }
    const uint64_t data = size - kHeaderBytes;
    if (count > data / width || count * width != data)
      ZT_THROW_INPUT(path, ": header says ", count, " tokens (", count * width, " bytes) but the file holds ", data,
                     " bytes of tokens: the shard is truncated or corrupt; re-create it with `zerotrain prepare`");
    return std::make_unique<MappedShard>(std::move(file), ShardFormat::Zerotrain, kHeaderBytes, static_cast<int>(width),
                                         static_cast<int64_t>(count), static_cast<int64_t>(vocab), eos);
  }
  if (size >= 4 && static_cast<int32_t>(le32(d)) == kLlmcMagic) {
    if (size < kLlmcHeaderBytes)
      ZT_THROW_INPUT(path, ": truncated llm.c shard header (", size, " of ", kLlmcHeaderBytes, " bytes)");
    const int32_t version = static_cast<int32_t>(le32(d + 4));
    const int64_t count = static_cast<int32_t>(le32(d + 8));
    if (version != 1)
      ZT_THROW_UNSUPPORTED(path, ": llm.c shard version ", version,
                           " is not supported (version 1 = GPT-2 uint16 tokens is)");
    const uint64_t data = size - kLlmcHeaderBytes;
    if (count < 0 || static_cast<uint64_t>(count) * 2 != data)
      ZT_THROW_INPUT(path, ": llm.c header says ", count, " tokens but the file holds ", data,
                     " bytes of uint16 tokens: the shard is truncated or corrupt");
    return std::make_unique<MappedShard>(std::move(file), ShardFormat::LlmC, kLlmcHeaderBytes, 2, count, 0, -1);
  }
  if (!ends_with(path, ".bin")) ZT_THROW_INPUT(path, ": not a token shard (", kFormats, ")");
  if (size % 2 != 0)
    ZT_THROW_INPUT(path, ": raw uint16 token file with an odd size (", size,
                   " bytes): truncated, or not a token file (", kFormats, ")");
  return std::make_unique<MappedShard>(std::move(file), ShardFormat::RawU16, 0, 2, static_cast<int64_t>(size / 2), 0,
                                       -1);
}

void TokenShard::read_mask(int64_t, int64_t n, uint8_t* out) const { std::fill(out, out + n, uint8_t{1}); }

const std::vector<int64_t>& TokenShard::sample_starts() const {
  static const std::vector<int64_t> none;
  return none;
}

std::vector<std::string> list_token_shards(const std::string& pattern) {
  std::vector<std::string> out;
  std::error_code ec;
  if (fs::is_directory(pattern, ec)) {
    for (const auto& e : fs::directory_iterator(pattern, ec)) {
      const std::string name = e.path().filename().string();
      if (name.empty() || name[0] == '.' || !ends_with(name, ".bin") || !e.is_regular_file(ec)) continue;
      out.push_back(e.path().string());
    }
    if (out.empty())
      ZT_THROW_INPUT(pattern, ": directory holds no .bin token shards (make them with `zerotrain prepare`)");
  } else if (fs::exists(pattern, ec)) {
    out.push_back(pattern);
  } else {
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
    ::globfree(&g);
    if (out.empty()) ZT_THROW_INPUT(pattern, ": no such token shard file, directory or matching glob");
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Version 1 (plain) or, with a mask, version 2 (SFT).
void write_shard(const std::string& path, const int32_t* ids, const uint8_t* mask, int64_t n,
                 const std::vector<int64_t>* samples, int64_t vocab_size, int64_t eos_id) {
  if (vocab_size <= 0 || vocab_size > (int64_t{1} << 31))
    ZT_THROW_INPUT(path, ": vocab_size ", vocab_size, " out of range (1 .. 2^31)");
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size)
      ZT_THROW_INPUT(path, ": token ", i, " has id ", ids[i], ", outside the vocabulary [0, ", vocab_size, ")");
  const int width = vocab_size <= 65536 ? 2 : 4;
  uint8_t header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, 8);
  put32(header + 8, mask ? 2 : 1);
  put32(header + 12, static_cast<uint32_t>(width));
  put64(header + 16, static_cast<uint64_t>(n));
  put64(header + 24, static_cast<uint64_t>(vocab_size));
  put64(header + 32, static_cast<uint64_t>(eos_id));
  if (mask) put64(header + 40, samples->size());
  write_file_atomic(path, [&](std::FILE* f) {
    auto put = [&](const void* p, size_t bytes) {
      if (bytes && std::fwrite(p, 1, bytes, f) != bytes)
        ZT_THROW_IO(path, ": write failed (", std::strerror(errno), ")");
    };
    put(header, sizeof header);
    std::vector<uint8_t> buf;
    constexpr int64_t kChunk = 1 << 16;
    for (int64_t s = 0; s < n; s += kChunk) {
      const int64_t m = std::min(kChunk, n - s);
      buf.resize(static_cast<size_t>(m * width));
      for (int64_t i = 0; i < m; ++i) {
        const uint32_t v = static_cast<uint32_t>(ids[s + i]);
        for (int b = 0; b < width; ++b) buf[static_cast<size_t>(i * width + b)] = static_cast<uint8_t>(v >> (8 * b));
      }
      put(buf.data(), buf.size());
    }
    if (!mask) return;
    std::vector<uint8_t> bits(static_cast<size_t>((n + 7) / 8), 0);
    for (int64_t i = 0; i < n; ++i)
      if (mask[i]) bits[static_cast<size_t>(i >> 3)] |= static_cast<uint8_t>(1u << (i & 7));
    const uint64_t at = v2_samples_offset(static_cast<uint64_t>(n), width);
    bits.resize(static_cast<size_t>(at - kHeaderBytes - static_cast<uint64_t>(n) * width), 0);
    put(bits.data(), bits.size());
    std::vector<uint8_t> starts(samples->size() * 8);
    for (size_t i = 0; i < samples->size(); ++i) put64(starts.data() + 8 * i, static_cast<uint64_t>((*samples)[i]));
    put(starts.data(), starts.size());
  });
}

}  // namespace

void write_token_shard(const std::string& path, const int32_t* ids, int64_t n, int64_t vocab_size, int64_t eos_id) {
  write_shard(path, ids, nullptr, n, nullptr, vocab_size, eos_id);
}

void write_sft_shard(const std::string& path, const int32_t* ids, const uint8_t* mask, int64_t n,
                     const std::vector<int64_t>& sample_starts, int64_t vocab_size, int64_t eos_id) {
  for (size_t i = 0; i < sample_starts.size(); ++i)
    if ((i == 0 && sample_starts[i] != 0) || sample_starts[i] >= n ||
        (i > 0 && sample_starts[i] <= sample_starts[i - 1]))
      ZT_THROW_INPUT(path, ": sample starts must begin at 0 and increase below ", n, " (sample ", i, ")");
  if (n > 0 && sample_starts.empty()) ZT_THROW_INPUT(path, ": an SFT shard needs its samples' starts");
  write_shard(path, ids, mask, n, &sample_starts, vocab_size, eos_id);
}

void write_llmc_shard(const std::string& path, const int32_t* ids, int64_t n) {
  if (n > INT32_MAX) ZT_THROW_INPUT(path, ": llm.c shards hold at most 2^31-1 tokens");
  std::vector<uint8_t> bytes(kLlmcHeaderBytes + static_cast<size_t>(n) * 2, 0);
  put32(bytes.data(), static_cast<uint32_t>(kLlmcMagic));
  put32(bytes.data() + 4, 1);
  put32(bytes.data() + 8, static_cast<uint32_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] > 65535)
      ZT_THROW_INPUT(path, ": token ", i, " has id ", ids[i], ", which does not fit llm.c's uint16");
    bytes[kLlmcHeaderBytes + 2 * i] = static_cast<uint8_t>(ids[i]);
    bytes[kLlmcHeaderBytes + 2 * i + 1] = static_cast<uint8_t>(ids[i] >> 8);
  }
  write_file_atomic(path, [&](std::FILE* f) {
    if (std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) ZT_THROW_IO(path, ": write failed");
  });
}

// ---- BatchLoader --------------------------------------------------------------------

struct BatchLoader::Impl {
  std::vector<std::unique_ptr<TokenShard>> shards;
  std::vector<int64_t> first_window;  // prefix sums: shard s owns windows [first_window[s], first_window[s+1])
  int64_t B = 0, T = 0;
  uint64_t seed = 0;
  int rank = 0, world = 1;
  int64_t vocab = 0;
  SampleWindows sample_windows = SampleWindows::PaddedPerSample;
  std::vector<bool> per_sample;  // shard s: one window per sample
  int64_t samples = 0, truncated = 0;
  LoaderState state;
  std::vector<int64_t> order;  // this epoch's permutation of window indices
  std::vector<int32_t> scratch;
  std::vector<uint8_t> mask;
  std::vector<int32_t> starts;  // the window's T+1 tokens' sample starts (packed SFT windows)

  int64_t windows() const { return first_window.back(); }
  int64_t global_batch() const { return B * world; }

  // Fisher-Yates with Philox words: the order depends on (seed, epoch) only.
  void shuffle() {
    const int64_t n = windows();
    order.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    const Philox rng(seed, 0x5EED0000ull + state.epoch);
    for (int64_t i = n - 1; i > 0; --i) {
      const auto w = rng.block(static_cast<uint64_t>(i));
      const uint64_t r = (static_cast<uint64_t>(w[0]) << 32) | w[1];
      // 64 random bits modulo i+1: the bias is < 2^-32 for any real dataset size.
      const int64_t j = static_cast<int64_t>(r % static_cast<uint64_t>(i + 1));
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
    }
  }

  std::pair<int64_t, int64_t> locate(int64_t w) const {
    const int64_t idx = order[static_cast<size_t>(w)];
    const auto it = std::upper_bound(first_window.begin(), first_window.end(), idx);
    const int64_t s = static_cast<int64_t>(it - first_window.begin()) - 1;
    const int64_t local = idx - first_window[static_cast<size_t>(s)];
    if (per_sample[static_cast<size_t>(s)])
      return {s, shards[static_cast<size_t>(s)]->sample_starts()[static_cast<size_t>(local)]};
    return {s, local * T};
  }
  // Tokens of the window starting at `start` in shard s: T+1, or the sample's length up to T+1.
  int64_t window_length(int64_t s, int64_t start) const {
    if (!per_sample[static_cast<size_t>(s)]) return T + 1;
    const TokenShard& shard = *shards[static_cast<size_t>(s)];
    const auto& st = shard.sample_starts();
    const auto next = std::upper_bound(st.begin(), st.end(), start);
    const int64_t end = next == st.end() ? shard.size() : *next;
    return std::min(end - start, T + 1);
  }
  // Whether shard s's windows pack several samples (SFT shards with SampleWindows::Packed).
  bool packed(int64_t s) const {
    return !per_sample[static_cast<size_t>(s)] && !shards[static_cast<size_t>(s)]->sample_starts().empty();
  }
  // starts[i] = the window position of the first token of token i's sample, for the T+1
  // tokens of the window at `start` of a packed shard (0 for a sample begun before the
  // window: positions restart at the window's start, as a cut sample's do in HF's packing).
  void fill_starts(int64_t s, int64_t start) {
    const auto& st = shards[static_cast<size_t>(s)]->sample_starts();
    auto next = std::upper_bound(st.begin(), st.end(), start);  // the first sample after token 0's
    int32_t current = 0;
    for (int64_t i = 0; i <= T; ++i) {
      if (next != st.end() && *next == start + i) {
        current = static_cast<int32_t>(i);
        ++next;
      }
      starts[static_cast<size_t>(i)] = current;
    }
  }
};

namespace {

// An SFT shard's samples each make their own window, padded (else windows of seq_len + 1
// tokens overlapping by one run through the shard).
bool padded_per_sample(const TokenShard& shard, SampleWindows sample_windows) {
  return !shard.sample_starts().empty() && sample_windows == SampleWindows::PaddedPerSample;
}

int64_t shard_windows(const TokenShard& shard, int64_t seq_len, SampleWindows sample_windows) {
  if (padded_per_sample(shard, sample_windows)) return static_cast<int64_t>(shard.sample_starts().size());
  return shard.size() > 0 ? (shard.size() - 1) / seq_len : 0;
}

}  // namespace

int64_t count_windows(const std::vector<std::string>& shard_paths, int64_t seq_len, SampleWindows sample_windows) {
  if (seq_len < 1) ZT_THROW_INPUT("sequence length (", seq_len, ") must be positive");
  int64_t windows = 0;
  for (const auto& p : shard_paths) windows += shard_windows(*open_token_shard(p), seq_len, sample_windows);
  return windows;
}

BatchLoader::BatchLoader(std::vector<std::string> shard_paths, int64_t micro_batch, int64_t seq_len, uint64_t seed,
                         int rank, int world_size, SampleWindows sample_windows)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (shard_paths.empty()) ZT_THROW_INPUT("no token shards given");
  if (micro_batch < 1 || seq_len < 1)
    ZT_THROW_INPUT("batch size (", micro_batch, ") and sequence length (", seq_len, ") must be positive");
  if (world_size < 1 || rank < 0 || rank >= world_size)
    ZT_THROW_INPUT("rank ", rank, " is outside the world of ", world_size, " processes");
  m.B = micro_batch;
  m.T = seq_len;
  m.seed = seed;
  m.rank = rank;
  m.world = world_size;
  m.sample_windows = sample_windows;
  m.first_window.push_back(0);
  for (const auto& p : shard_paths) {
    m.shards.push_back(open_token_shard(p));
    const TokenShard& shard = *m.shards.back();
    const int64_t n = shard.size();
    const auto& starts = shard.sample_starts();
    m.samples += static_cast<int64_t>(starts.size());
    const bool per_sample = padded_per_sample(shard, sample_windows);
    m.per_sample.push_back(per_sample);
    if (per_sample)
      for (size_t i = 0; i < starts.size(); ++i)
        if ((i + 1 < starts.size() ? starts[i + 1] : n) - starts[i] > seq_len + 1) ++m.truncated;
    m.first_window.push_back(m.first_window.back() + shard_windows(shard, seq_len, sample_windows));
  }
  if (m.windows() < m.global_batch()) {
    int64_t tokens = 0;
    for (const auto& s : m.shards) tokens += s->size();
    ZT_THROW_INPUT(shard_paths.front(), (shard_paths.size() > 1 ? str(" (and ", shard_paths.size() - 1, " more)") : ""),
                   ": ", tokens, " tokens make ", m.windows(), " windows of ", seq_len + 1,
                   " tokens, fewer than one global batch of ", m.global_batch(),
                   " (micro-batch x world size); use more data, a shorter sequence or a smaller batch");
  }
  m.scratch.resize(static_cast<size_t>(seq_len + 1));
  m.mask.resize(static_cast<size_t>(seq_len + 1));
  m.starts.resize(static_cast<size_t>(seq_len + 1));
  m.shuffle();
}

BatchLoader::~BatchLoader() = default;

int64_t BatchLoader::windows_per_epoch() const { return impl_->windows(); }
int64_t BatchLoader::steps_per_epoch() const { return impl_->windows() / impl_->global_batch(); }
int64_t BatchLoader::samples() const { return impl_->samples; }
int64_t BatchLoader::truncated_samples() const { return impl_->truncated; }
bool BatchLoader::packs_samples() const {
  for (size_t s = 0; s < impl_->shards.size(); ++s)
    if (impl_->packed(static_cast<int64_t>(s))) return true;
  return false;
}
LoaderState BatchLoader::state() const { return impl_->state; }
void BatchLoader::set_vocab_size(int64_t vocab_size) { impl_->vocab = vocab_size; }
std::pair<int64_t, int64_t> BatchLoader::window(int64_t w) const {
  ZT_CHECK(w >= 0 && w < impl_->windows(), "window ", w, " out of range");
  return impl_->locate(w);
}

void BatchLoader::restore(const LoaderState& s) {
  Impl& m = *impl_;
  if (s.position > static_cast<uint64_t>(m.windows()))
    ZT_THROW_INPUT("data loader state: position ", s.position, " lies past the epoch's ", m.windows(),
                   " windows (the checkpoint belongs to other data or another sequence length)");
  const bool reshuffle = s.epoch != m.state.epoch;
  m.state = s;
  if (reshuffle) m.shuffle();
}

void BatchLoader::next(const Tensor& tokens, const Tensor& targets) { next(tokens, targets, Tensor()); }

void BatchLoader::next(const Tensor& tokens, const Tensor& targets, const Tensor& segment_starts) {
  Impl& m = *impl_;
  if (segment_starts.has_data())
    ZT_CHECK(segment_starts.dtype() == DType::I32 && segment_starts.shape() == Shape({m.B, m.T}) &&
                 segment_starts.is_contiguous() && segment_starts.device().is_cpu(),
             "BatchLoader: segment_starts must be host contiguous i32 [", m.B, ", ", m.T, "], got ",
             shape_str(segment_starts.shape()));
  ZT_CHECK(tokens.dtype() == DType::I32 && targets.dtype() == DType::I32, "BatchLoader: tokens/targets must be i32");
  ZT_CHECK(tokens.shape() == Shape({m.B, m.T}) && targets.shape() == Shape({m.B, m.T}),
           "BatchLoader: tokens/targets must be [", m.B, ", ", m.T, "], got ", shape_str(tokens.shape()));
  ZT_CHECK(tokens.is_contiguous() && targets.is_contiguous() && tokens.device().is_cpu(),
           "BatchLoader: host contiguous tensors expected");
  if (m.state.position + static_cast<uint64_t>(m.global_batch()) > static_cast<uint64_t>(m.windows())) {
    ++m.state.epoch;  // the partial last global batch is dropped, as DistributedSampler(drop_last) does
    m.state.position = 0;
    m.shuffle();
  }
  int32_t* tok = static_cast<int32_t*>(tokens.data());
  int32_t* tgt = static_cast<int32_t*>(targets.data());
  for (int64_t b = 0; b < m.B; ++b) {
    const int64_t w = static_cast<int64_t>(m.state.position) + m.rank * m.B + b;
    const auto [s, start] = m.locate(w);
    const TokenShard& shard = *m.shards[static_cast<size_t>(s)];
    const int64_t len = m.window_length(s, start);
    shard.read(start, len, m.scratch.data());
    if (m.vocab > 0)
      for (int64_t i = 0; i < len; ++i)
        if (m.scratch[static_cast<size_t>(i)] < 0 || m.scratch[static_cast<size_t>(i)] >= m.vocab)
          ZT_THROW_INPUT(shard.path(), ": token ", start + i, " has id ", m.scratch[static_cast<size_t>(i)],
                         ", outside the model's vocabulary of ", m.vocab,
                         " (the data was tokenized for another model; re-run `zerotrain prepare` with its tokenizer)");
    // A padded sample: the pad inputs come after it and attention is causal, so they change
    // none of its positions; their targets are ignored.
    const int32_t pad = shard.eos_id() >= 0 ? static_cast<int32_t>(shard.eos_id()) : 0;
    for (int64_t i = len; i <= m.T; ++i) m.scratch[static_cast<size_t>(i)] = pad;
    std::memcpy(tok + b * m.T, m.scratch.data(), static_cast<size_t>(m.T) * 4);
    const bool packed = m.packed(s);
    if (packed) m.fill_starts(s, start);
    if (segment_starts.has_data()) {
      int32_t* seg = segment_starts.data_as<int32_t>() + b * m.T;
      if (packed)
        std::memcpy(seg, m.starts.data(), static_cast<size_t>(m.T) * 4);
      else
        std::fill(seg, seg + m.T, 0);  // one sequence (a padded sample or plain text)
    }
    int32_t* t = tgt + b * m.T;
    if (!shard.has_loss_mask()) {
      std::memcpy(t, m.scratch.data() + 1, static_cast<size_t>(m.T) * 4);
      continue;
    }
    shard.read_mask(start, len, m.mask.data());
    for (int64_t i = 0; i < m.T; ++i)
      t[i] = i + 1 < len && m.mask[static_cast<size_t>(i + 1)] ? m.scratch[static_cast<size_t>(i + 1)] : kIgnoreTarget;
    // Packed: a sample's last token does not predict the next sample's first (HF's
    // DataCollatorWithFlattening sets that label to -100 too).
    if (packed)
      for (int64_t i = 0; i < m.T; ++i)
        if (m.starts[static_cast<size_t>(i + 1)] == i + 1) t[i] = kIgnoreTarget;
  }
  m.state.position += static_cast<uint64_t>(m.global_batch());
}

}  // namespace zt::io
