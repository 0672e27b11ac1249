// Built when the CUDA backend is off: every kernel of the backend/cuda/X_ops.h lists, each
// throwing Unsupported (no CUDA tensor can exist in this build, so only a direct call gets
// here). Defined from the lists themselves (backend/kernel_list.h): a kernel added to a
// list has its stand-in here without another line.
#include "backend/cuda/activation_ops.h"
#include "backend/cuda/attention_ops.h"
#include "backend/cuda/cross_entropy_ops.h"
#include "backend/cuda/dropout_ops.h"
#include "backend/cuda/elementwise_ops.h"
#include "backend/cuda/embedding_ops.h"
#include "backend/cuda/linear_ops.h"
#include "backend/cuda/norm_ops.h"
#include "backend/cuda/optimizer_ops.h"
#include "backend/cuda/rope_ops.h"
#include "backend/stub/no_cuda.h"

// The lists name their parameters; a stand-in reads none of them.
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define ZT_MISSING_CUDA_KERNEL(ret, name, params) \
  ret name params { no_cuda("cuda::" #name); }

namespace zt::cuda {

ZT_ACTIVATION_CUDA_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_ATTENTION_CUDA_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_CROSS_ENTROPY_CUDA_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_DROPOUT_CUDA_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_ELEMENTWISE_CUDA_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_EMBEDDING_CUDA_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_LINEAR_CUDA_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_NORM_CUDA_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_OPTIMIZER_CUDA_KERNELS(ZT_MISSING_CUDA_KERNEL)
ZT_ROPE_CUDA_KERNELS(ZT_MISSING_CUDA_KERNEL)

}  // namespace zt::cuda
