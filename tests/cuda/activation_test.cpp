// CUDA activations (ops/activation.h on device tensors) against the CPU backend: GELU and
// SiLU forward/backward, SwiGLU forward/backward on contiguous and row-strided views (the
// two column halves of a fused [N, 2F] gate/up buffer, 3-D [B, T, F] views), in place, and
// shifted by one element (the unaligned element-by-element path). Activations are f32 or
// bf16; a bf16 run is compared with the CPU run on the same bf16-rounded inputs.
// Bounds (max|gpu - cpu| / max|cpu|): f32 1e-5 (the device's expf and the CPU's polynomial
// exp differ by an ulp or two); bf16 1e-2 (the output rounding alone is 2^-9 relative).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "common/cuda_tensor.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/activation.h"

namespace {

using namespace zt;
using zt::testing::make;
using zt::testing::randn;
using zt::testing::to_host;

// A device copy of a contiguous host tensor, `offset` elements past the start of its own
// (256-byte aligned) allocation: offset 1 misaligns every 16-byte vector.
struct DeviceCopy {
  OwnedTensor storage;
  Tensor view;
  operator const Tensor&() const { return view; }
};
DeviceCopy on_device(const Tensor& host, int64_t offset = 0) {
  DeviceCopy d;
  d.storage = OwnedTensor({host.numel() + offset}, host.dtype(), Device::cuda());
  char* base = static_cast<char*>(d.storage->data()) + offset * static_cast<int64_t>(dtype_size(host.dtype()));
  cuda::copy_to_device(base, host.data(), host.nbytes());
  d.view = Tensor(base, host.shape(), host.dtype(), Device::cuda(), host.name());
  return d;
}
std::vector<float> values(const Tensor& t) {
  return t.device().is_cuda() ? to_host(t)->to_f32_vector() : t.to_f32_vector();
}

// max|got - want| / max|want| (absolute when want is all zero).
double max_rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(got[i]) - want[i]));
    den = std::max(den, std::fabs(static_cast<double>(want[i])));
  }
  return den > 0 ? num / den : num;
}
bool no_nan_or_inf(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float f) { return std::isfinite(f); });
}
double bound(DType dt) { return dt == DType::F32 ? 1e-5 : dt == DType::F16 ? 5e-3 : 1e-2; }

// Expects the device result to match the CPU reference within the dtype's bound.
void expect_close(const Tensor& device, const Tensor& cpu, DType dt, const char* what) {
  const std::vector<float> got = values(device), want = values(cpu);
  EXPECT_TRUE(no_nan_or_inf(got)) << what;
  EXPECT_LE(max_rel_err(got, want), bound(dt)) << what;
}

// Inputs with the tails and the special points of the activations up front.
std::vector<float> activation_inputs(int64_t n, uint32_t seed) {
  std::vector<float> v = randn(static_cast<size_t>(n), seed, 3.0f);
  const float specials[] = {0.0f, -0.0f, 20.0f, -20.0f, 9.5f, -9.5f, 1e-4f, -100.0f, 88.0f, -88.0f};
  for (size_t i = 0; i < std::size(specials) && i < v.size(); ++i) v[i] = specials[i];
  return v;
}

// The values a dtype holds (identity for f32), as an f32 host tensor: the CPU's view of the
// GPU's input.
OwnedTensor as_f32(const std::vector<float>& v, Shape shape, DType dt) {
  return make(make(v, shape, dt)->to_f32_vector(), shape, DType::F32);
}

using Forward = void (*)(const Tensor&, const Tensor&);
using Backward = void (*)(const Tensor&, const Tensor&, const Tensor&);

void check_pointwise(Forward forward, Backward backward, uint32_t seed) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{33}, int64_t{768},
                      int64_t{3072} * 4 + 3, int64_t{2048} * 8 * 2})
      for (int64_t offset : {0, 1}) {
        SCOPED_TRACE(str(dtype_name(dt), " n=", n, " offset=", offset));
        const std::vector<float> x = activation_inputs(n, seed++), dy = randn(static_cast<size_t>(n), seed++);
        // CPU reference on the values the GPU sees.
        const OwnedTensor cx = as_f32(x, {n}, dt), cdy = as_f32(dy, {n}, dt);
        OwnedTensor cy({n}, DType::F32), cdx({n}, DType::F32);
        forward(cy, cx);
        backward(cdx, cdy, cx);

        const OwnedTensor hx = make(x, {n}, dt), hdy = make(dy, {n}, dt);
        const DeviceCopy gx = on_device(hx, offset), gdy = on_device(hdy, offset);
        DeviceCopy gy = on_device(hx, offset), gdx = on_device(hx, offset);  // outputs (overwritten)
        forward(gy, gx);
        expect_close(gy, cy, dt, "forward");
        backward(gdx, gdy, gx);
        expect_close(gdx, cdx, dt, "backward");

        // In place: out == inp, then dinp == dout.
        DeviceCopy inplace = on_device(hx, offset);
        forward(inplace, inplace);
        expect_close(inplace, cy, dt, "forward in place");
        DeviceCopy grad = on_device(hdy, offset);
        backward(grad, grad, gx);
        expect_close(grad, cdx, dt, "backward in place");
      }
}

TEST(CudaActivation, GeluMatchesCpu) {
  ZT_REQUIRE_GPU();
  check_pointwise(ops::gelu_forward, ops::gelu_backward, 1);
}

TEST(CudaActivation, SiluMatchesCpu) {
  ZT_REQUIRE_GPU();
  check_pointwise(ops::silu_forward, ops::silu_backward, 1000);
}

// One SwiGLU case: gate and up are the column halves [0, F) and [F, 2F) of a fused buffer of
// shape lead + [2F] when `fused`, else separate contiguous tensors of shape lead + [F]; the
// device buffers start `offset` elements past an aligned address. Checks forward (into a
// contiguous out, and in place into gate) and backward (into the halves of a fused gradient
// buffer, or separate tensors, and in place over the inputs).
void check_swiglu(Shape lead, int64_t F, bool fused, DType dt, int64_t offset, uint32_t seed) {
  SCOPED_TRACE(
      str(dtype_name(dt), " lead=", shape_str(lead), " F=", F, fused ? " fused" : " separate", " offset=", offset));
  int64_t rows = 1;
  for (int64_t d : lead) rows *= d;
  Shape half = lead, full = lead;
  half.push_back(F);
  full.push_back(fused ? 2 * F : F);
  const int64_t last = static_cast<int64_t>(lead.size());
  const int64_t width = fused ? 2 * F : F;
  const std::vector<float> gu = activation_inputs(rows * width, seed);
  const std::vector<float> u2 = randn(static_cast<size_t>(rows * F), seed + 1);
  const std::vector<float> dy = randn(static_cast<size_t>(rows * F), seed + 2);
  // Views of gate and up within their buffers (host or device).
  auto gate_of = [&](const Tensor& buf) { return fused ? buf.narrow(last, 0, F) : buf; };
  auto up_of = [&](const Tensor& buf, const Tensor& separate) { return fused ? buf.narrow(last, F, F) : separate; };

  // CPU reference on the values the GPU sees.
  const OwnedTensor c_buf = as_f32(gu, full, dt), c_up = as_f32(u2, half, dt), c_dy = as_f32(dy, half, dt);
  OwnedTensor c_out(half, DType::F32);
  ops::swiglu_forward(c_out, gate_of(c_buf), up_of(c_buf, c_up));
  OwnedTensor c_grad(full, DType::F32), c_dup(half, DType::F32);
  ops::swiglu_backward(gate_of(c_grad), up_of(c_grad, c_dup), c_dy, gate_of(c_buf), up_of(c_buf, c_up));

  const OwnedTensor h_buf = make(gu, full, dt), h_up = make(u2, half, dt), h_dy = make(dy, half, dt);
  const DeviceCopy g_buf = on_device(h_buf, offset), g_up = on_device(h_up, offset), g_dy = on_device(h_dy, offset);
  const Tensor g_gate_v = gate_of(g_buf), g_up_v = up_of(g_buf, g_up);

  DeviceCopy g_out = on_device(make(std::vector<float>(static_cast<size_t>(rows * F), 7.0f), half, dt), offset);
  ops::swiglu_forward(g_out, g_gate_v, g_up_v);
  expect_close(g_out, c_out, dt, "forward");

  // Backward into a fused (or separate) gradient buffer; with `fused` the whole buffer is
  // compared, so a write outside either half would show.
  DeviceCopy g_grad = on_device(make(std::vector<float>(static_cast<size_t>(rows * width), 7.0f), full, dt), offset);
  DeviceCopy g_dup = on_device(make(std::vector<float>(static_cast<size_t>(rows * F), 7.0f), half, dt), offset);
  ops::swiglu_backward(gate_of(g_grad), up_of(g_grad, g_dup), g_dy, g_gate_v, g_up_v);
  expect_close(g_grad, c_grad, dt, "backward dgate (and dup when fused)");
  if (!fused) expect_close(g_dup, c_dup, dt, "backward dup");

  // Forward in place: out is gate itself.
  {
    DeviceCopy buf = on_device(h_buf, offset), up = on_device(h_up, offset);
    ops::swiglu_forward(gate_of(buf), gate_of(buf), up_of(buf, up));
    if (fused) {
      // The up half must be untouched; the gate half must hold out.
      const std::vector<float> all = values(buf), want_out = values(c_out), want_in = values(c_buf);
      std::vector<float> got_out, want_up, got_up;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < F; ++j) {
          got_out.push_back(all[static_cast<size_t>(r * width + j)]);
          got_up.push_back(all[static_cast<size_t>(r * width + F + j)]);
          want_up.push_back(want_in[static_cast<size_t>(r * width + F + j)]);
        }
      EXPECT_LE(max_rel_err(got_out, want_out), bound(dt)) << "forward in place";
      EXPECT_EQ(got_up, want_up) << "forward in place wrote into up";
    } else {
      expect_close(buf, c_out, dt, "forward in place");
    }
  }
  // Backward in place: dgate over gate, dup over up.
  {
    DeviceCopy buf = on_device(h_buf, offset), up = on_device(h_up, offset);
    ops::swiglu_backward(gate_of(buf), up_of(buf, up), g_dy, gate_of(buf), up_of(buf, up));
    expect_close(buf, c_grad, dt, "backward in place (dgate, and dup when fused)");
    if (!fused) expect_close(up, c_dup, dt, "backward in place dup");
  }
}

TEST(CudaActivation, SwigluContiguousMatchesCpu) {
  ZT_REQUIRE_GPU();
  uint32_t seed = 2000;
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int64_t offset : {0, 1})
      for (int64_t F : {1, 5, 8, 9, 768, 5632}) {
        check_swiglu({3}, F, false, dt, offset, seed += 3);
        check_swiglu({1}, F, false, dt, offset, seed += 3);
      }
}

TEST(CudaActivation, SwigluOnHalvesOfAFusedBufferMatchesCpu) {
  ZT_REQUIRE_GPU();
  uint32_t seed = 3000;
  // F = 100: rows of 200 elements (800 bytes f32, 400 bytes bf16) keep 16-byte alignment in
  // f32 only; F = 5 and 1 never do; 768 and 2048 always do (the vector path).
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int64_t offset : {0, 1})
      for (int64_t F : {1, 5, 100, 768, 2048}) {
        check_swiglu({7}, F, true, dt, offset, seed += 3);
        check_swiglu({2, 3}, F, true, dt, offset, seed += 3);  // [B, T, F] views
      }
}

// A [rows, F] view at column `col` of a [rows, width] buffer holding `v` (host or device).
struct Strided {
  OwnedTensor host;
  DeviceCopy device;
  Tensor host_view, device_view;
};
Strided strided(const std::vector<float>& v, int64_t rows, int64_t width, int64_t col, int64_t F, DType dt,
                int64_t offset) {
  Strided s;
  s.host = make(make(v, {rows, width}, dt)->to_f32_vector(), {rows, width}, DType::F32);  // the values dt holds
  s.device = on_device(make(v, {rows, width}, dt), offset);
  s.host_view = s.host->narrow(1, col, F);
  s.device_view = s.device.view.narrow(1, col, F);
  return s;
}

// Every operand with its own row stride (and its own column start), so that mixing up two
// operands' layouts shows.
TEST(CudaActivation, SwigluWithADifferentLayoutPerOperandMatchesCpu) {
  ZT_REQUIRE_GPU();
  uint32_t seed = 4000;
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int64_t F : {1, 8, 13, 768})
      for (int64_t offset : {0, 1}) {
        SCOPED_TRACE(str(dtype_name(dt), " F=", F, " offset=", offset));
        const int64_t rows = 5;
        auto input = [&](int64_t width, int64_t col) {
          return strided(activation_inputs(rows * width, seed++), rows, width, col, F, dt, offset);
        };
        const Strided gate = input(2 * F, 0), up = input(F, 0), dy = input(F + 5, 3);
        Strided out = input(2 * F, F), dgate = input(F, 0), dup = input(3 * F + 1, 2 * F);
        ops::swiglu_forward(out.host_view, gate.host_view, up.host_view);
        ops::swiglu_forward(out.device_view, gate.device_view, up.device_view);
        expect_close(out.device, out.host, dt, "forward (whole output buffer)");
        ops::swiglu_backward(dgate.host_view, dup.host_view, dy.host_view, gate.host_view, up.host_view);
        ops::swiglu_backward(dgate.device_view, dup.device_view, dy.device_view, gate.device_view, up.device_view);
        expect_close(dgate.device, dgate.host, dt, "dgate (whole buffer)");
        expect_close(dup.device, dup.host, dt, "dup (whole buffer)");
      }
}

TEST(CudaActivation, Bf16ActivationsAreRejectedOnTheCpu) {
  // No GPU needed: the CPU backend keeps f32 activations.
  OwnedTensor x = make({1.0f, 2.0f}, {2}, DType::BF16), y({2}, DType::BF16);
  EXPECT_THROW(ops::gelu_forward(y, x), Error);
  OwnedTensor g = make({1.0f, 2.0f}, {1, 2}, DType::BF16), u = make({1.0f, 2.0f}, {1, 2}, DType::BF16),
              o({1, 2}, DType::BF16);
  EXPECT_THROW(ops::swiglu_forward(o, g, u), Error);
}

}  // namespace
