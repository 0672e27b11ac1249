// ZT_HOST_DEVICE marks the inline functions that the host and the CUDA kernels share (the
// Philox stream, the fp8 bit code), so both sides compute bit for bit the same thing.
#pragma once

#if defined(__CUDACC__)
#define ZT_HOST_DEVICE __host__ __device__
#else
#define ZT_HOST_DEVICE
#endif
