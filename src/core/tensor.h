// Tensor: a non-owning view of memory (pointer, shape, strides in elements, dtype,
// device, name). Memory is owned elsewhere: a Buffer, a flat unit, an mmap'd file.
// OwnedTensor pairs a Buffer with a contiguous view of all of it, for scratch and tests.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"

namespace zt {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);
Shape contiguous_strides(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, Shape shape, DType dtype, Device device = Device::cpu(), std::string name = {});
  Tensor(void* data, Shape shape, Shape strides, DType dtype, Device device, std::string name);

  void* data() const { return data_; }
  template <class T>
  T* data_as() const {
    check_type(dtype_of<T>::value);
    return static_cast<T*>(data_);
  }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const std::string& name() const { return name_; }
  bool defined() const { return data_ != nullptr || numel() == 0; }
  // Optional kernel arguments (a bias, a saved statistic, a gradient not wanted) come as an
  // empty Tensor: true when this one carries memory.
  bool has_data() const { return data_ != nullptr; }
  // The memory as T with no dtype check, null when absent: for kernels that already
  // dispatched on dtype() and name the element by a device type (__nv_bfloat16, half).
  template <class T>
  T* storage_as() const {
    return static_cast<T*>(data_);
  }
  bool is_contiguous() const;

  // Views (share memory). reshape needs a contiguous tensor.
  Tensor reshape(Shape shape) const;
  Tensor flatten() const { return reshape({numel()}); }
  // Elements [start, start+length) along dimension d.
  Tensor narrow(int64_t d, int64_t start, int64_t length) const;
  // Index i of dimension 0, dropping that dimension.
  Tensor select(int64_t i) const;
  Tensor with_name(std::string name) const;

  // Host-only element access, for tests and small tools (converts to f32).
  float get_f32(int64_t flat_index) const;
  void set_f32(int64_t flat_index, float value) const;
  std::vector<float> to_f32_vector() const;  // host, contiguous
  void fill_f32(float value) const;          // host
  void zero() const;                         // host or device, contiguous
  void copy_from(const Tensor& src) const;   // host, same shape; converts dtype

  void check_type(DType dtype) const;

 private:
  void* data_ = nullptr;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::F32;
  Device device_{};
  std::string name_;
};

class OwnedTensor {
 public:
  OwnedTensor() = default;
  OwnedTensor(Shape shape, DType dtype, Device device = Device::cpu(), std::string name = {});
  static OwnedTensor zeros(Shape shape, DType dtype, Device device = Device::cpu());

  const Tensor& view() const { return view_; }
  operator const Tensor&() const { return view_; }
  const Tensor* operator->() const { return &view_; }
  template <class T>
  T* data() const {
    return view_.data_as<T>();
  }

 private:
  Buffer buffer_;
  Tensor view_;
};

}  // namespace zt
