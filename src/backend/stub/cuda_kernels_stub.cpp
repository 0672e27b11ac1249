// Built when the CUDA backend is off: every CUDA kernel of the backend/X_kernels.h lists, each
// throwing Unsupported (no CUDA tensor can exist in this build, so only a direct call gets
// here). Defined from the lists themselves (backend/kernel_list.h): a kernel added to a
// list has its stand-in here without another line.
#include "backend/activation_kernels.h"
#include "backend/attention_kernels.h"
#include "backend/cross_entropy_kernels.h"
#include "backend/decode_attention_kernels.h"
#include "backend/dropout_kernels.h"
#include "backend/elementwise_kernels.h"
#include "backend/embedding_kernels.h"
#include "backend/fp8_kernels.h"
#include "backend/gemm_kernels.h"
#include "backend/linear_kernels.h"
#include "backend/norm_kernels.h"
#include "backend/optimizer_kernels.h"
#include "backend/random_kernels.h"
#include "backend/rope_kernels.h"
#include "backend/stub/no_cuda.h"

// The lists name their parameters; a stand-in reads none of them.
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define ZT_MISSING_CUDA_KERNEL(ret, name, params) \
  ret name params { no_cuda("cuda::" #name); }

namespace zt::cuda {

ZT_ACTIVATION_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_ATTENTION_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_ATTENTION_CUDA_ONLY_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_CROSS_ENTROPY_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_DECODE_ATTENTION_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_DROPOUT_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_ELEMENTWISE_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_ELEMENTWISE_CUDA_ONLY_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_EMBEDDING_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_FP8_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_GEMM_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_LINEAR_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_NORM_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_NORM_CUDA_ONLY_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_OPTIMIZER_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_RANDOM_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_ROPE_KERNELS(ZT_MISSING_CUDA_KERNEL)

}  // namespace zt::cuda
