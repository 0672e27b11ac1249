// Filesystem predicates used across the tree: one definition each.
#pragma once
#include <string>

namespace zt {

// Whether `path` names a directory, following links; false where it does not exist or
// cannot be examined (no permission on a parent): callers report "not found" then.
bool is_dir(const std::string& path);
// Whether `path` names a regular file, following links; false as for is_dir.
bool is_file(const std::string& path);

}  // namespace zt
