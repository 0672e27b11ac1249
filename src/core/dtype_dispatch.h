#pragma once
#include "core/error.h"

namespace zt {
template <class Fn>
decltype(auto) dispatch_float(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::F32:
      return fn(float{});
    case DType::BF16:
      return fn(bf16{});
    case DType::F16:
      return fn(f16{});
    default:
      break;
  }
  if (is_fp8(dtype))
    ZT_THROW_UNSUPPORTED(dtype_name(dtype),
                         " is a storage dtype: no op computes in it; convert it to f32, bf16 or f16 first "
                         "(ops/fp8.h)");
  throw Error(ErrorKind::Internal, str("expected a floating dtype, got ", dtype_name(dtype)));
}
}  // namespace zt
