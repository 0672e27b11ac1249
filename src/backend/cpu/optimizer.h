#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "backend/optimizer_hyper.h"

namespace zt::cpu {

template <class P, class G>
void adamw_step(P* param, float* master, const G* grad, float* m, float* v, int64_t n, const AdamWHyper& h);

}  // namespace zt::cpu
