// Internal to comm/mpi_*.cpp: MPI initialised once per process and finalised at exit,
// the datatype and reduction op for each DType, and MPI error codes turned into zt::Error.
#pragma once
#include <mpi.h>

#include "core/dtype.h"
#include "comm/communicator.h"

namespace zt::comm {

class MpiRuntime {
 public:
  // Initialises MPI on first use (MPI_THREAD_MULTIPLE when the library offers it, else
  // what it offers). Without mpirun this is an MPI singleton: world size 1. If someone else
  // initialised MPI already, they also finalise it.
  static MpiRuntime& get();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int thread_level() const { return thread_level_; }
  MPI_Datatype datatype(DType dtype) const;
  // Predefined MPI_SUM/MPI_MAX for f32 and integers; for bf16/f16 (no MPI type) user ops
  // that convert each pair to f32, combine, and round back: a sum is rounded at every
  // pairwise step of MPI's reduction tree, not once at the end.
  MPI_Op op(DType dtype, ReduceOp op) const;

 private:
  MpiRuntime();
  ~MpiRuntime();

  bool owns_ = false;
  int thread_level_ = MPI_THREAD_SINGLE;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  MPI_Op bf16_max_ = MPI_OP_NULL;
  MPI_Op f16_sum_ = MPI_OP_NULL;
  MPI_Op f16_max_ = MPI_OP_NULL;
};

// Throws zt::Error "<what> failed on world rank R: <MPI's message>" unless rc is MPI_SUCCESS.
void check_mpi(int rc, const std::string& what);

bool mpi_finalized();

}  // namespace zt::comm
