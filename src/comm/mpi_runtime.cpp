#include "comm/mpi_runtime.h"

#include "core/error.h"
#include "core/log.h"

namespace zt::comm {

namespace {

template <class H, ReduceOp kOp>
void combine_half(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = to_f32(a[i]);
    const float y = to_f32(b[i]);
    if constexpr (kOp == ReduceOp::Sum) {
      if constexpr (std::is_same_v<H, bf16>) {
        b[i] = to_bf16(x + y);
      } else {
        b[i] = to_f16(x + y);
      }
    } else {
      // Max picks one of the inputs: no rounding. NaN wins, as in the f32 reduction of
      // a NaN loss check.
      if (x != x || x > y) b[i] = a[i];
    }
  }
}

MPI_Op create_op(MPI_User_function* fn) {
  MPI_Op op = MPI_OP_NULL;
  check_mpi(MPI_Op_create(fn, /*commute=*/1, &op), "MPI_Op_create");
  return op;
}

}  // namespace

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

void check_mpi(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, message, &length);
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw Error(ErrorKind::Internal, str(what, " failed on world rank ", rank, ": ", message, " (MPI error ", rc,
                                       "); the job cannot continue: abort it"));
}

MpiRuntime& MpiRuntime::get() {
  static MpiRuntime runtime;
  return runtime;
}

MpiRuntime::MpiRuntime() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    MPI_Query_thread(&thread_level_);
  } else {
    if (mpi_finalized()) {
      ZT_THROW_UNSUPPORTED("MPI was already finalised in this process; it cannot start again");
    }
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level_), "MPI_Init_thread");
    owns_ = true;
    if (thread_level_ < MPI_THREAD_MULTIPLE) {
      ZT_DEBUG("MPI offers thread level ", thread_level_, " (< MULTIPLE): call communicators from one thread");
    }
  }
  bf16_sum_ = create_op(&combine_half<bf16, ReduceOp::Sum>);
  bf16_max_ = create_op(&combine_half<bf16, ReduceOp::Max>);
  f16_sum_ = create_op(&combine_half<f16, ReduceOp::Sum>);
  f16_max_ = create_op(&combine_half<f16, ReduceOp::Max>);
}

MpiRuntime::~MpiRuntime() {
  if (mpi_finalized()) return;
  for (MPI_Op* op : {&bf16_sum_, &bf16_max_, &f16_sum_, &f16_max_}) {
    if (*op != MPI_OP_NULL) MPI_Op_free(op);
  }
  if (owns_) MPI_Finalize();
}

MPI_Datatype MpiRuntime::datatype(DType dtype) const {
  switch (dtype) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::BF16:
    case DType::F16:
      return MPI_UINT16_T;  // bytes only; reductions use the user ops
    case DType::I32:
      return MPI_INT32_T;
    case DType::I64:
      return MPI_INT64_T;
    case DType::F8E4M3:
    case DType::F8E5M2:
      break;  // a byte type would let a reduction add codes: communicate fp8 as bf16 or f32
  }
  ZT_THROW_UNSUPPORTED("MPI communicator: dtype ", dtype_name(dtype), " is not supported");
}

MPI_Op MpiRuntime::op(DType dtype, ReduceOp op) const {
  const bool sum = op == ReduceOp::Sum;
  switch (dtype) {
    case DType::BF16:
      return sum ? bf16_sum_ : bf16_max_;
    case DType::F16:
      return sum ? f16_sum_ : f16_max_;
    default:
      return sum ? MPI_SUM : MPI_MAX;
  }
}

}  // namespace zt::comm
