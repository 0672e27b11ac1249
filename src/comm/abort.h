// Ending the whole job from the top-level error handler: when one rank fails, the others
// are blocked in collectives it will never join, so exiting this process alone would
// leave them waiting until their timeouts. Library code throws; only main calls this.
#pragma once
#include <string>

namespace zt::comm {

// Prints "zerotrain: rank R of N: <why>" to stderr and ends every rank of the job
// (MPI_Abort on MPI_COMM_WORLD with `exit_code`, which mpirun returns: 2 for bad input, as
// one process would); without MPI it ends this process with that code.
[[noreturn]] void abort_job(const std::string& why, int exit_code = 1);

}  // namespace zt::comm
