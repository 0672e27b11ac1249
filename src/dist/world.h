// The communicator a program starts with: MPI over all ranks when a launcher started
// several processes, the single-process communicator otherwise (no MPI start-up cost,
// and a build without MPI still runs one process).
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace zt::dist {

std::unique_ptr<Communicator> make_world_communicator();

}  // namespace zt::dist
