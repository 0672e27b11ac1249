// Argument checks shared by every Communicator: the transports move raw bytes, so a
// mismatch here would otherwise be silent memory corruption or a hang.
#include "comm/communicator.h"

#include <cstdint>

#include "core/error.h"

namespace zt::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Max:
      return "max";
  }
  return "?";
}

void check_buffer(const char* op, const Tensor& t) {
  if (!t.device().is_cpu()) {
    ZT_THROW_UNSUPPORTED(op, ": tensor '", t.name(), "' is on ", t.device().name(),
                         "; this communicator moves host buffers only (device buffers need "
                         "the NCCL communicator, or copy to the host first)");
  }
  check_buffer_any_device(op, t);
}

void check_buffer_any_device(const char* op, const Tensor& t) {
  ZT_CHECK(t.defined(), op, ": tensor '", t.name(), "' has no data");
  ZT_CHECK(t.is_contiguous(), op, ": tensor '", t.name(), "' of shape ", shape_str(t.shape()),
           " is not contiguous; pass a contiguous view (flat unit slices are)");
}

namespace {
void check_pair(const char* op, const Tensor& input, const Tensor& output, BufferPlace place) {
  const auto check = place == BufferPlace::Host ? check_buffer : check_buffer_any_device;
  check(op, input);
  check(op, output);
  ZT_CHECK(input.device() == output.device(), op, ": input on ", input.device().name(), ", output on ",
           output.device().name());
}
}  // namespace

void check_reduce_scatter(const Tensor& input, const Tensor& output, int size, BufferPlace place) {
  check_pair("reduce_scatter", input, output, place);
  ZT_CHECK(input.dtype() == output.dtype(), "reduce_scatter: input is ", dtype_name(input.dtype()), " but output is ",
           dtype_name(output.dtype()), "; both must have one dtype");
  ZT_CHECK(input.numel() == output.numel() * size, "reduce_scatter: input has ", input.numel(),
           " elements, expected group size ", size, " x output's ", output.numel(),
           " (pad the flat buffer to a multiple of the group size)");
  const auto* in = static_cast<const char*>(input.data());
  const auto* out = static_cast<const char*>(output.data());
  ZT_CHECK(out + output.nbytes() <= in || in + input.nbytes() <= out || output.numel() == 0,
           "reduce_scatter: output overlaps input; use a separate output buffer");
}

void check_all_gather(const Tensor& input, const Tensor& output, int size, BufferPlace place) {
  check_pair("all_gather", input, output, place);
  ZT_CHECK(input.dtype() == output.dtype(), "all_gather: input is ", dtype_name(input.dtype()), " but output is ",
           dtype_name(output.dtype()), "; both must have one dtype");
  ZT_CHECK(output.numel() == input.numel() * size, "all_gather: output has ", output.numel(),
           " elements, expected group size ", size, " x input's ", input.numel());
}

namespace {
// Validates one count vector; returns its sum.
int64_t checked_count_sum(const char* which, const std::vector<int64_t>& counts, int size) {
  ZT_CHECK(counts.size() == static_cast<size_t>(size), "all_to_all_v: ", which, " has ", counts.size(),
           " entries, expected one per rank of the group (", size, ")");
  int64_t sum = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    ZT_CHECK(counts[p] >= 0, "all_to_all_v: ", which, "[", p, "] is ", counts[p], "; counts must be >= 0");
    sum += counts[p];
  }
  return sum;
}
}  // namespace

void check_all_to_all_v_layout(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                               const std::vector<int64_t>& recv_counts, int size) {
  ZT_CHECK(input.dtype() == output.dtype(), "all_to_all_v: input is ", dtype_name(input.dtype()), " but output is ",
           dtype_name(output.dtype()), "; both must have one dtype");
  const int64_t sent = checked_count_sum("send_counts", send_counts, size);
  const int64_t received = checked_count_sum("recv_counts", recv_counts, size);
  ZT_CHECK(sent == input.numel(), "all_to_all_v: send_counts sum to ", sent, " elements but input '", input.name(),
           "' has ", input.numel(), "; the counts must cover the input exactly");
  ZT_CHECK(received == output.numel(), "all_to_all_v: recv_counts sum to ", received, " elements but output '",
           output.name(), "' has ", output.numel(), "; size the output to the sum of the counts received");
  const auto* in = static_cast<const char*>(input.data());
  const auto* out = static_cast<const char*>(output.data());
  ZT_CHECK(input.nbytes() == 0 || output.nbytes() == 0 || out + output.nbytes() <= in || in + input.nbytes() <= out,
           "all_to_all_v: output overlaps input; use a separate output buffer");
}

void check_all_to_all_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                        const std::vector<int64_t>& recv_counts, int size, BufferPlace place) {
  check_pair("all_to_all_v", input, output, place);
  check_all_to_all_v_layout(input, output, send_counts, recv_counts, size);
}

bool is_gather_slice(const Tensor& input, const Tensor& output, int rank) {
  const auto* slice = static_cast<const char*>(output.data()) + static_cast<size_t>(rank) * input.nbytes();
  return input.data() == slice;
}

void check_peer(const char* op, int peer, int size) {
  if (peer < 0 || peer >= size) {
    ZT_THROW_INPUT(op, ": peer rank ", peer, " is outside the group of ", size, " ranks (valid: 0..", size - 1, ")");
  }
}

bool any_rank(Communicator& comm, bool flag) {
  if (comm.size() == 1) return flag;
  OwnedTensor f({1}, DType::I32);
  f.data<int32_t>()[0] = flag ? 1 : 0;
  comm.all_reduce(f, ReduceOp::Max);
  return f.data<int32_t>()[0] != 0;
}

double sum_over_ranks(Communicator& comm, double value) {
  if (comm.size() == 1) return value;
  OwnedTensor parts({2}, DType::F32);
  const float hi = static_cast<float>(value);
  parts.data<float>()[0] = hi;
  parts.data<float>()[1] = static_cast<float>(value - static_cast<double>(hi));
  comm.all_reduce(parts, ReduceOp::Sum);
  return static_cast<double>(parts.data<float>()[0]) + static_cast<double>(parts.data<float>()[1]);
}

}  // namespace zt::comm
