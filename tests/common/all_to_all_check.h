// all_to_all_v against a local reference, for every communicator's test: rank r sends
// count(r, p) elements to peer p (zeros included, uneven), element j of that segment tagged
// (r, p, j) exactly in every dtype used (bf16: integers up to 256 at scale 1), so the
// received layout is checked exactly.
#pragma once
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace zt::testing {

inline int64_t a2a_count(int r, int p, int64_t scale) { return scale * ((3 * r + 5 * p + 1) % 4); }
inline float a2a_tag(int r, int p, int64_t j, int64_t scale) {
  return scale == 1 ? static_cast<float>(64 * r + 16 * p + j) : static_cast<float>(1000000 * r + 10000 * p + j);
}

inline void check_all_to_all_v(comm::Communicator& comm, DType dt, int64_t scale) {
  const int me = comm.rank();
  std::vector<int64_t> send_counts, recv_counts;
  int64_t n_in = 0, n_out = 0;
  for (int p = 0; p < comm.size(); ++p) {
    send_counts.push_back(a2a_count(me, p, scale));
    recv_counts.push_back(a2a_count(p, me, scale));
    n_in += send_counts.back();
    n_out += recv_counts.back();
  }
  OwnedTensor input({n_in}, dt);
  int64_t i = 0;
  for (int p = 0; p < comm.size(); ++p)
    for (int64_t j = 0; j < send_counts[p]; ++j) input->set_f32(i++, a2a_tag(me, p, j, scale));
  OwnedTensor output({n_out}, dt);
  output->fill_f32(-1.0f);
  comm.all_to_all_v(input, output, send_counts, recv_counts);
  int64_t o = 0;
  for (int p = 0; p < comm.size(); ++p)
    for (int64_t j = 0; j < recv_counts[p]; ++j, ++o)
      ASSERT_EQ(output->get_f32(o), a2a_tag(p, me, j, scale)) << dtype_name(dt) << " from rank " << p << " j=" << j;
  EXPECT_EQ(o, n_out);
}

}  // namespace zt::testing
