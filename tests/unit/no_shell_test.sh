#!/usr/bin/env bash
# No shell runs anything zerotrain builds from a path or a name: src/ calls neither system()
# nor popen() (a folder named `run';touch x;'` once ran `touch x` from `zerotrain plot`).
# Programs are started from an argument vector through core/subprocess.h.
# Usage: no_shell_test.sh [SRC_DIR]   (default: the src/ next to tests/)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src=${1:-"$root/src"}
[[ -d $src ]] || { echo "no_shell: no source folder $src" >&2; exit 2; }
if hits=$(grep -rn "system(\|popen(" "$src"); then
  echo "no_shell: system()/popen() in src/ (start programs with zt::run_program, core/subprocess.h):" >&2
  echo "$hits" >&2
  exit 1
fi
echo "no_shell: no system()/popen() in $src"
