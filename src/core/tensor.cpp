#include "core/tensor.h"

#include <cstring>

#include "core/error.h"

namespace zt {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

Tensor::Tensor(void* data, Shape shape, DType dtype, Device device, std::string name)
    : data_(data), shape_(std::move(shape)), dtype_(dtype), device_(device), name_(std::move(name)) {
  for (int64_t s : shape_) ZT_CHECK(s >= 0, "negative dimension in ", shape_str(shape_));
  strides_ = contiguous_strides(shape_);
}

Tensor::Tensor(void* data, Shape shape, Shape strides, DType dtype, Device device, std::string name)
    : data_(data),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      dtype_(dtype),
      device_(device),
      name_(std::move(name)) {
  ZT_CHECK(shape_.size() == strides_.size(), "shape and strides differ in rank");
}

int64_t Tensor::size(int64_t d) const {
  if (d < 0) d += dim();
  ZT_CHECK(d >= 0 && d < dim(), "dimension ", d, " out of range for ", shape_str(shape_));
  return shape_[static_cast<size_t>(d)];
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

Tensor Tensor::reshape(Shape shape) const {
  ZT_CHECK(is_contiguous(), "reshape of a non-contiguous tensor ", name_);
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      ZT_CHECK(infer < 0, "reshape with two -1 dimensions");
      infer = static_cast<int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) shape[static_cast<size_t>(infer)] = known ? numel() / known : 0;
  ZT_CHECK(shape_numel(shape) == numel(), "reshape ", shape_str(shape_), " -> ", shape_str(shape),
           " changes the element count (", name_, ")");
  return Tensor(data_, std::move(shape), dtype_, device_, name_);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  if (d < 0) d += dim();
  ZT_CHECK(d >= 0 && d < dim(), "narrow: bad dimension");
  ZT_CHECK(start >= 0 && length >= 0 && start + length <= shape_[d], "narrow [", start, ", ", start + length,
           ") out of range for ", shape_str(shape_), " (", name_, ")");
  Shape shape = shape_;
  shape[d] = length;
  char* p = static_cast<char*>(data_) + start * strides_[d] * static_cast<int64_t>(dtype_size(dtype_));
  return Tensor(p, std::move(shape), strides_, dtype_, device_, name_);
}

Tensor Tensor::select(int64_t i) const {
  ZT_CHECK(dim() >= 1 && i >= 0 && i < shape_[0], "select ", i, " out of range for ", shape_str(shape_));
  char* p = static_cast<char*>(data_) + i * strides_[0] * static_cast<int64_t>(dtype_size(dtype_));
  return Tensor(p, Shape(shape_.begin() + 1, shape_.end()), Shape(strides_.begin() + 1, strides_.end()), dtype_,
                device_, name_);
}

Tensor Tensor::with_name(std::string name) const {
  Tensor t = *this;
  t.name_ = std::move(name);
  return t;
}

void Tensor::check_type(DType dtype) const {
  ZT_CHECK(dtype == dtype_, "tensor '", name_, "' has dtype ", dtype_name(dtype_), ", expected ", dtype_name(dtype));
}

namespace {
// Offset in elements of the flat (row-major logical) index, honouring strides.
int64_t strided_offset(const Shape& shape, const Shape& strides, int64_t flat) {
  int64_t off = 0;
  for (size_t i = shape.size(); i-- > 0;) {
    off += (flat % shape[i]) * strides[i];
    flat /= shape[i];
  }
  return off;
}
}  // namespace

float Tensor::get_f32(int64_t flat) const {
  ZT_CHECK(device_.is_cpu(), "get_f32 on a device tensor");
  ZT_CHECK(flat >= 0 && flat < numel(), "index ", flat, " out of range");
  const int64_t off = strided_offset(shape_, strides_, flat);
  const char* p = static_cast<const char*>(data_) + off * static_cast<int64_t>(dtype_size(dtype_));
  float out;
  convert(p, dtype_, &out, DType::F32, 1);
  return out;
}

void Tensor::set_f32(int64_t flat, float value) const {
  ZT_CHECK(device_.is_cpu(), "set_f32 on a device tensor");
  ZT_CHECK(flat >= 0 && flat < numel(), "index ", flat, " out of range");
  const int64_t off = strided_offset(shape_, strides_, flat);
  char* p = static_cast<char*>(data_) + off * static_cast<int64_t>(dtype_size(dtype_));
  convert(&value, DType::F32, p, dtype_, 1);
}

std::vector<float> Tensor::to_f32_vector() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  if (is_contiguous()) {
    convert(data_, dtype_, out.data(), DType::F32, out.size());
  } else {
    for (int64_t i = 0; i < numel(); ++i) out[static_cast<size_t>(i)] = get_f32(i);
  }
  return out;
}

void Tensor::fill_f32(float value) const {
  for (int64_t i = 0; i < numel(); ++i) set_f32(i, value);
}

void Tensor::zero() const {
  ZT_CHECK(is_contiguous(), "zero of a non-contiguous tensor ", name_);
  if (nbytes()) allocator_for(device_).zero(data_, nbytes());
}

void Tensor::copy_from(const Tensor& src) const {
  ZT_CHECK(src.shape() == shape_, "copy_from: shape ", shape_str(src.shape()), " vs ", shape_str(shape_));
  ZT_CHECK(device_.is_cpu() && src.device().is_cpu(), "copy_from is host-only");
  if (is_contiguous() && src.is_contiguous()) {
    convert(src.data(), src.dtype(), data_, dtype_, static_cast<size_t>(numel()));
  } else {
    for (int64_t i = 0; i < numel(); ++i) set_f32(i, src.get_f32(i));
  }
}

OwnedTensor::OwnedTensor(Shape shape, DType dtype, Device device, std::string name)
    : buffer_(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device),
      view_(buffer_.data(), std::move(shape), dtype, device, std::move(name)) {}

OwnedTensor OwnedTensor::zeros(Shape shape, DType dtype, Device device) {
  OwnedTensor t(std::move(shape), dtype, device);
  t.view_.zero();
  return t;
}

}  // namespace zt
