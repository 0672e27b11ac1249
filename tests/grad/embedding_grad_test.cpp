// embedding_forward / embedding_backward against a double reference and central finite
// differences; repeated tokens accumulate; bf16 tables; bad token ids; determinism.
#include <omp.h>

#include <random>

#include "common/grad_check.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/embedding.h"

namespace {
using zt::DType;
using zt::OwnedTensor;
using zt::Shape;
using zt::testing::dot;
using zt::testing::err;
using zt::testing::make;
using zt::testing::max_rel_error;
using zt::testing::numeric_gradient;
using zt::testing::randn;
using zt::testing::to_d;

std::vector<double> ref_embed(const std::vector<int32_t>& tok, const std::vector<double>& wte,
                              const std::vector<double>* wpe, int B, int T, int C) {
  std::vector<double> out(static_cast<size_t>(B * T * C));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        out[(b * T + t) * C + c] = wte[tok[b * T + t] * C + c] + (wpe ? (*wpe)[t * C + c] : 0.0);
  return out;
}

OwnedTensor make_tokens(const std::vector<int32_t>& tok, int B, int T) {
  OwnedTensor t({B, T}, DType::I32);
  std::copy(tok.begin(), tok.end(), t.data<int32_t>());
  return t;
}

TEST(EmbeddingGrad, ForwardAndFiniteDifferences) {
  const int B = 2, T = 5, V = 11, C = 7, P = 8;
  // Repeated ids (3 appears three times) exercise the accumulation.
  const std::vector<int32_t> tok = {3, 0, 10, 3, 7, 1, 3, 9, 0, 5};
  for (bool with_wpe : {true, false}) {
    const auto wte = randn(V * C, 1), wpe = randn(P * C, 2), wl = randn(B * T * C, 3);
    OwnedTensor ttok = make_tokens(tok, B, T), twte = make(wte, {V, C}), twpe = make(wpe, {P, C});
    OwnedTensor out({B, T, C}, DType::F32);
    zt::ops::embedding_forward(out, ttok, twte, with_wpe ? twpe.view() : zt::Tensor{});
    const auto wted = to_d(wte), wped = to_d(wpe), wld = to_d(wl);
    const auto ref = ref_embed(tok, wted, with_wpe ? &wped : nullptr, B, T, C);
    const double ef = max_rel_error(to_d(out->to_f32_vector()), ref, 1e-6);
    EXPECT_LT(ef, 1e-6);

    const auto g0e = randn(V * C, 4), g0p = randn(P * C, 5);
    OwnedTensor dout = make(wl, {B, T, C}), dwte = make(g0e, {V, C}), dwpe = make(g0p, {P, C});
    zt::ops::embedding_backward(dwte, with_wpe ? dwpe.view() : zt::Tensor{}, dout, ttok);
    auto Le = [&](const std::vector<double>& v) {
      return dot(ref_embed(tok, v, with_wpe ? &wped : nullptr, B, T, C), wld);
    };
    auto Lp = [&](const std::vector<double>& v) { return dot(ref_embed(tok, wted, &v, B, T, C), wld); };
    auto ge = dwte->to_f32_vector();
    for (size_t i = 0; i < ge.size(); ++i) ge[i] -= g0e[i];
    const double ee = err(to_d(ge), numeric_gradient(Le, wted));
    EXPECT_LT(ee, 1e-5);
    double ep = 0;
    if (with_wpe) {
      auto gp = dwpe->to_f32_vector();
      for (size_t i = 0; i < gp.size(); ++i) gp[i] -= g0p[i];
      ep = err(to_d(gp), numeric_gradient(Lp, wped));
      EXPECT_LT(ep, 1e-5);
    } else {
      EXPECT_EQ(dwpe->to_f32_vector(), g0p);
    }
    std::printf("embedding wpe=%d: fwd %.2e dwte %.2e dwpe %.2e\n", with_wpe, ef, ee, ep);
  }
}

TEST(EmbeddingGrad, HalfTablesMatchF32) {
  for (DType dt : {DType::BF16, DType::F16}) {
    const int B = 3, T = 4, V = 6, C = 9;
    std::vector<int32_t> tok(B * T);
    for (int i = 0; i < B * T; ++i) tok[i] = (i * 7 + 2) % V;
    OwnedTensor ttok = make_tokens(tok, B, T);
    OwnedTensor wte_h = make(randn(V * C, 11), {V, C}, dt), wpe_h = make(randn(T * C, 12), {T, C}, dt);
    OwnedTensor wte32 = make(wte_h->to_f32_vector(), {V, C}), wpe32 = make(wpe_h->to_f32_vector(), {T, C});
    OwnedTensor oh({B, T, C}, DType::F32), o32({B, T, C}, DType::F32);
    zt::ops::embedding_forward(oh, ttok, wte_h, wpe_h);
    zt::ops::embedding_forward(o32, ttok, wte32, wpe32);
    EXPECT_EQ(oh->to_f32_vector(), o32->to_f32_vector());

    OwnedTensor dout = make(randn(B * T * C, 13), {B, T, C});
    OwnedTensor dh = make(randn(V * C, 14), {V, C}, dt), dph = make(randn(T * C, 15), {T, C}, dt);
    const auto g0 = dh->to_f32_vector(), g0p = dph->to_f32_vector();
    OwnedTensor d32 = OwnedTensor::zeros({V, C}, DType::F32), dp32 = OwnedTensor::zeros({T, C}, DType::F32);
    zt::ops::embedding_backward(dh, dph, dout, ttok);
    zt::ops::embedding_backward(d32, dp32, dout, ttok);
    const auto a = dh->to_f32_vector(), g = d32->to_f32_vector();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], make({g0[i] + g[i]}, {1}, dt)->get_f32(0));
    const auto ap = dph->to_f32_vector(), gp = dp32->to_f32_vector();
    for (size_t i = 0; i < ap.size(); ++i) EXPECT_EQ(ap[i], make({g0p[i] + gp[i]}, {1}, dt)->get_f32(0));
  }
}

TEST(EmbeddingGrad, BadTokenIdIsBadInput) {
  const int V = 11, C = 4;
  OwnedTensor wte = make(randn(V * C, 1), {V, C}), out({1, 3, C}, DType::F32);
  for (int32_t bad : {11, -1, 50257}) {
    OwnedTensor tok = make_tokens({1, bad, 2}, 1, 3);
    try {
      zt::ops::embedding_forward(out, tok, wte, zt::Tensor{});
      ADD_FAILURE() << "no error for token " << bad;
    } catch (const zt::Error& e) {
      EXPECT_EQ(e.kind(), zt::ErrorKind::BadInput);
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("11"), std::string::npos) << msg;
    }
    OwnedTensor dwte = OwnedTensor::zeros({V, C}, DType::F32);
    EXPECT_THROW(zt::ops::embedding_backward(dwte, zt::Tensor{}, out, tok), zt::Error);
  }
}

TEST(EmbeddingGrad, BackwardIndependentOfThreadCount) {
  const int B = 4, T = 256, V = 50, C = 96;
  std::vector<int32_t> tok(B * T);
  std::mt19937 gen(7);
  for (auto& t : tok) t = static_cast<int32_t>(gen() % 20);  // many repeats
  OwnedTensor ttok = make_tokens(tok, B, T), dout = make(randn(B * T * C, 8), {B, T, C});
  std::vector<float> ref_e, ref_p;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    OwnedTensor de = OwnedTensor::zeros({V, C}, DType::F32), dp = OwnedTensor::zeros({T, C}, DType::F32);
    zt::ops::embedding_backward(de, dp, dout, ttok);
    if (ref_e.empty()) {
      ref_e = de->to_f32_vector();
      ref_p = dp->to_f32_vector();
    } else {
      EXPECT_EQ(de->to_f32_vector(), ref_e);
      EXPECT_EQ(dp->to_f32_vector(), ref_p);
    }
  }
  omp_set_num_threads(omp_get_num_procs());
}

}  // namespace
