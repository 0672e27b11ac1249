#include "comm/single.h"

#include <cstring>

#include "core/error.h"
#include "ops/copy.h"

namespace zt::comm {

namespace {
WorkPtr done() { return std::make_unique<CompletedWork>(); }

// Host or device buffers (a single GPU process runs the engine through this communicator).
void copy_bytes(const Tensor& from, const Tensor& to) {
  if (from.data() != to.data() && from.nbytes() > 0) ops::copy(to, from);
}
}  // namespace

WorkPtr SingleCommunicator::all_reduce_async(const Tensor& buffer, ReduceOp) {
  check_buffer_any_device("all_reduce", buffer);
  return done();
}

WorkPtr SingleCommunicator::reduce_scatter_async(const Tensor& input, const Tensor& output) {
  check_reduce_scatter(input, output, 1, BufferPlace::Any);
  copy_bytes(input, output);
  return done();
}

WorkPtr SingleCommunicator::all_gather_async(const Tensor& input, const Tensor& output) {
  check_all_gather(input, output, 1, BufferPlace::Any);
  copy_bytes(input, output);
  return done();
}

WorkPtr SingleCommunicator::broadcast_async(const Tensor& buffer, int root) {
  check_buffer_any_device("broadcast", buffer);
  check_peer("broadcast (root)", root, 1);
  return done();
}

WorkPtr SingleCommunicator::all_to_all_v_async(const Tensor& input, const Tensor& output,
                                               const std::vector<int64_t>& send_counts,
                                               const std::vector<int64_t>& recv_counts) {
  check_all_to_all_v(input, output, send_counts, recv_counts, 1, BufferPlace::Any);
  copy_bytes(input, output);
  return done();
}

WorkPtr SingleCommunicator::send_async(const Tensor& buffer, int peer, int tag) {
  check_buffer("send", buffer);
  check_peer("send", peer, 1);
  const auto* bytes = static_cast<const char*>(buffer.data());
  mailbox_[tag].emplace_back(bytes, bytes + buffer.nbytes());
  return done();
}

WorkPtr SingleCommunicator::recv_async(const Tensor& buffer, int peer, int tag) {
  check_buffer("recv", buffer);
  check_peer("recv", peer, 1);
  auto it = mailbox_.find(tag);
  if (it == mailbox_.end() || it->second.empty()) {
    // With one rank nobody else can send it later: waiting would hang forever.
    ZT_THROW_INPUT("recv from rank 0 with tag ", tag,
                   ": nothing was sent with that tag, and with world size 1 nothing can be; "
                   "send before receiving");
  }
  std::vector<char> message = std::move(it->second.front());
  it->second.pop_front();
  if (message.size() != buffer.nbytes()) {
    ZT_THROW_INPUT("recv with tag ", tag, ": the message has ", message.size(), " bytes but the buffer '",
                   buffer.name(), "' holds ", buffer.nbytes(), "; send and receive the same count and dtype");
  }
  if (!message.empty()) std::memcpy(buffer.data(), message.data(), message.size());
  return done();
}

WorkPtr SingleCommunicator::barrier_async() { return done(); }

std::unique_ptr<Communicator> SingleCommunicator::split(int color, int) {
  if (color == kNoColor) return nullptr;
  ZT_CHECK(color >= 0, "split: color ", color, " must be >= 0 (or kNoColor)");
  return std::make_unique<SingleCommunicator>();
}

}  // namespace zt::comm
