// Ending the whole job from the top-level error handler: when one rank fails, the others
// are blocked in collectives it will never join, so exiting this process alone would
// leave them waiting until their timeouts. Library code throws; only main calls this.
#pragma once
#include <string>

namespace zt::dist {

// Prints "zerotrain: rank R of N: <why>" to stderr and ends every rank of the job
// (MPI_Abort on MPI_COMM_WORLD, exit code 1); without MPI it ends this process (exit 1).
[[noreturn]] void abort_job(const std::string& why);

}  // namespace zt::dist
