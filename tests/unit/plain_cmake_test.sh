#!/usr/bin/env bash
# A plain `cmake -B build` (no preset, no cache variables) configures as a C++ project
# should: where nvcc is found, the CUDA backend with a default architecture that compiles
# the kernels (sm_90, not the compiler's default); and `cmake --install` installs the
# zerotrain command. Configures only (no build), in a scratch folder.
# Usage: plain_cmake_test.sh SOURCE_DIR SCRATCH_DIR
set -euo pipefail
src=${1:?source dir}
out=${2:?scratch dir}
rm -rf "$out"
trap 'rm -rf "$out"' EXIT
cmake -S "$src" -B "$out" -DZT_BUILD_TESTS=OFF -DZT_BUILD_BENCH=OFF >"$out.log" 2>&1 || {
  cat "$out.log"
  rm -f "$out.log"
  exit 1
}
rm -f "$out.log"
cache=$out/CMakeCache.txt
if grep -q '^ZT_WITH_CUDA:BOOL=ON' "$cache"; then
  arch=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$cache")
  [[ $arch == 90 ]] || { echo "plain cmake: CMAKE_CUDA_ARCHITECTURES is '$arch', expected 90"; exit 1; }
  echo "plain cmake: CUDA backend on, architectures $arch"
else
  echo "plain cmake: no nvcc here, CPU build"
fi
grep -q 'bin" TYPE EXECUTABLE FILES "[^"]*/zerotrain"' "$out/cmake_install.cmake" || {
  echo "plain cmake: cmake --install does not install the zerotrain command"
  exit 1
}
echo "plain cmake: cmake --install installs bin/zerotrain"
