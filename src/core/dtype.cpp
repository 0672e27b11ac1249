#include "core/dtype.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace zt {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return 4;
    case DType::BF16:
      return 2;
    case DType::F16:
      return 2;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::F8E4M3:
    case DType::F8E5M2:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "f32";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
    case DType::F8E4M3:
      return "f8_e4m3";
    case DType::F8E5M2:
      return "f8_e5m2";
  }
  return "?";
}

bool is_floating(DType dtype) { return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16; }
bool is_fp8(DType dtype) { return dtype == DType::F8E4M3 || dtype == DType::F8E5M2; }

DType parse_dtype(const std::string& raw) {
  std::string name = raw;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  if (name == "f32" || name == "float32" || name == "fp32" || name == "float") return DType::F32;
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  if (name == "f16" || name == "float16" || name == "fp16" || name == "half") return DType::F16;
  if (name == "i32" || name == "int32") return DType::I32;
  if (name == "i64" || name == "int64" || name == "long") return DType::I64;
  // torch's float8_e4m3fn is the OCP E4M3 (no infinities); float8_e5m2 is IEEE-like.
  if (name == "f8_e4m3" || name == "float8_e4m3fn" || name == "float8_e4m3" || name == "fp8_e4m3" || name == "e4m3")
    return DType::F8E4M3;
  if (name == "f8_e5m2" || name == "float8_e5m2" || name == "fp8_e5m2" || name == "e5m2") return DType::F8E5M2;
  if (name.find("fnuz") != std::string::npos)
    ZT_THROW_INPUT("dtype '", raw,
                   "' (the fnuz fp8 variants: another exponent bias, no negative zero) is not supported; "
                   "use f8_e4m3 (float8_e4m3fn) or f8_e5m2 (float8_e5m2)");
  ZT_THROW_INPUT("unknown dtype '", raw, "': use one of f32, bf16, f16, i32, i64, f8_e4m3, f8_e5m2");
}

namespace {
template <class S>
float load_any(const S* p, size_t i) {
  if constexpr (std::is_same_v<S, int32_t> || std::is_same_v<S, int64_t>)
    return static_cast<float>(p[i]);
  else
    return load_f32(p[i]);
}
template <class S, class D>
void convert_typed(const S* src, D* dst, size_t n) {
  if constexpr (std::is_same_v<S, D>) {
    std::copy(src, src + n, dst);
  } else if constexpr (std::is_integral_v<S> && std::is_integral_v<D>) {
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<D>(src[i]);
  } else if constexpr (std::is_integral_v<D>) {
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<D>(load_any(src, i));
  } else {
#pragma omp parallel for if (n > (1u << 16)) schedule(static)
    for (size_t i = 0; i < n; ++i) dst[i] = store_as<D>(load_any(src, i));
  }
}
template <class Fn>
void dispatch_any(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::F32:
      fn(float{});
      return;
    case DType::BF16:
      fn(bf16{});
      return;
    case DType::F16:
      fn(f16{});
      return;
    case DType::I32:
      fn(int32_t{});
      return;
    case DType::I64:
      fn(int64_t{});
      return;
    case DType::F8E4M3:
      fn(f8e4m3{});
      return;
    case DType::F8E5M2:
      fn(f8e5m2{});
      return;
  }
}
}  // namespace

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  dispatch_any(src_dtype, [&](auto s) {
    dispatch_any(dst_dtype, [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      convert_typed(static_cast<const S*>(src), static_cast<D*>(dst), n);
    });
  });
}

}  // namespace zt
