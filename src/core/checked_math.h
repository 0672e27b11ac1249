// Whole-number arithmetic on values that come from files and command lines (batch sizes,
// model dimensions, LoRA ranks): a product that does not fit int64 is a BadInput error
// naming what was multiplied, never a wrapped (undefined) value that later sizes an
// allocation or a loop.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace zt {

// a * b, or nullopt-like false when it overflows int64.
inline bool mul_fits(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }
inline bool add_fits(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }

// The product of `factors`; BadInput "<what>: <a> * <b> * ... does not fit in 64 bits"
// plus `fix` when it overflows.
inline int64_t checked_product(std::initializer_list<int64_t> factors, const std::string& what,
                               const std::string& fix) {
  int64_t p = 1;
  bool ok = true;
  for (int64_t f : factors) ok = ok && mul_fits(p, f, &p);
  if (!ok) {
    std::string text;
    for (int64_t f : factors) text += (text.empty() ? "" : " * ") + std::to_string(f);
    ZT_THROW_INPUT(what, ": ", text, " does not fit in a 64-bit integer; ", fix);
  }
  return p;
}

}  // namespace zt
