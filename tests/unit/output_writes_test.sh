#!/usr/bin/env bash
# Every file zerotrain opens for writing is opened by src/io/output_file.cpp (O_NOFOLLOW, a
# regular file only: a symbolic link planted at an output name is refused, never followed).
# Fails when any other file under src/ opens one itself: std::ofstream / fstream, fopen or
# freopen with a writing mode, creat(), or open()/openat() with O_CREAT, O_WRONLY, O_RDWR or O_TRUNC. Write
# through io::open_for_write / open_file_for_write / write_file_atomic instead.
# Usage: output_writes_test.sh [SRC_DIR]   (default: the src/ next to tests/)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src=${1:-"$root/src"}
src=${src%/}
[[ -f $src/io/output_file.cpp ]] || { echo "output_writes: no $src/io/output_file.cpp" >&2; exit 2; }

found="$(grep -rnE 'std::(o|)fstream|\bf(re)?open\([^;]*"[^"]*[wa+][^"]*"|\bcreat\(|\bopen(at)?\(.*O_(CREAT|WRONLY|RDWR|TRUNC)' \
  --include='*.cpp' --include='*.h' --include='*.cu' --include='*.cuh' "$src" |
  grep -v "^$src/io/output_file.cpp:" | grep -vE '^[^:]+:[0-9]+:\s*//' || true)"
if [[ -n $found ]]; then
  echo "output_writes: files opened for writing outside src/io/output_file.cpp (use io::open_for_write," >&2
  echo "open_file_for_write or write_file_atomic, which never follow a link):" >&2
  echo "$found" >&2
  exit 1
fi
echo "output_writes: every write goes through src/io/output_file.cpp"
