#include "comm/group.h"

#include "core/error.h"

namespace zt::comm {

Group::Group(Communicator& host, Communicator* device) : host_(&host), device_(device) {
  ZT_CHECK(!device || (device->rank() == host.rank() && device->size() == host.size()),
           "a group's device communicator (rank ", device ? device->rank() : -1, " of ", device ? device->size() : -1,
           ") must have its host communicator's rank and size (", host.rank(), " of ", host.size(), ")");
}

}  // namespace zt::comm
