#include "core/error.h"

namespace zt {

void throw_check_failure(const char* file, int line, const char* expr, const std::string& message) {
  throw Error(ErrorKind::Internal,
              str("internal check failed at ", file, ":", line, ": ", expr, message.empty() ? "" : " — ", message));
}

}  // namespace zt
