// Built when the CUDA backend is off: the device allocator is never registered, so any
// use of a CUDA device fails with a clear message from core/allocator.cpp.
namespace zt::cuda {
bool available() { return false; }
}  // namespace zt::cuda
