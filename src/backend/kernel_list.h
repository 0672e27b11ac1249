// Kernel lists: each backend/X_kernels.h writes its family's signatures once, as an
// X-macro list of K(return type, name, (parameters)) entries, and declares them with
// ZT_DECLARE_KERNEL. The CPU-only build's stand-ins (backend/stub/cuda_kernels_stub.cpp)
// are defined from the same lists, so a kernel added to a list is declared and stubbed
// in one place. No default arguments in a list: its entries are also definitions.
#pragma once

#define ZT_DECLARE_KERNEL(ret, name, params) ret name params;
