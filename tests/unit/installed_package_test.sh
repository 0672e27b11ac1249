#!/usr/bin/env bash
# `cmake --install` of this build makes a CMake package another project uses as it would
# any library's: find_package(zerotrain CONFIG REQUIRED) and zerotrain::zerotrain, nothing
# else named. Installs into a scratch prefix, then configures, builds and runs a consumer
# project made of examples/custom_loop.cpp (the public API only) for 2 steps of the default
# run; the consumer's build must not see the source tree's src/.
# Usage: installed_package_test.sh SOURCE_DIR BUILD_DIR SCRATCH_DIR
set -euo pipefail
src=${1:?source dir}
build=${2:?build dir}
out=${3:?scratch dir}
rm -rf "$out"
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/consumer"
log=$out/log
fail() { echo "installed package: $1"; cat "$log"; exit 1; }

cmake --install "$build" --prefix "$out/prefix" >"$log" 2>&1 || fail "cmake --install failed"
config=$(find "$out/prefix" -name zerotrainConfig.cmake | head -1)
[[ -n $config ]] || fail "no zerotrainConfig.cmake under the prefix"
[[ -x $out/prefix/bin/zerotrain ]] || fail "no bin/zerotrain"

cp "$src/examples/custom_loop.cpp" "$out/consumer/"
cat >"$out/consumer/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(consumer LANGUAGES CXX)
find_package(zerotrain 0.1 CONFIG REQUIRED)
add_executable(custom_loop custom_loop.cpp)
target_link_libraries(custom_loop PRIVATE zerotrain::zerotrain)
CMAKE
# The package must carry no path into the source tree (its src/ is private).
if grep -rq -- "$src/src" "$(dirname "$config")"; then fail "the package names $src/src"; fi
cmake -S "$out/consumer" -B "$out/consumer/build" -DCMAKE_PREFIX_PATH="$out/prefix" \
  -DCMAKE_BUILD_TYPE=Release >>"$log" 2>&1 || fail "find_package(zerotrain) failed"
cmake --build "$out/consumer/build" -j 2 >>"$log" 2>&1 || fail "the consumer does not build"
(cd "$src" && "$out/consumer/build/custom_loop" examples/default_run.yaml --max_steps 2 \
  --output_dir "$out/run" --overwrite_output_dir) >>"$log" 2>&1 || fail "the consumer does not run"
grep -q "step" "$log" || fail "the consumer printed no step"
echo "installed package: find_package(zerotrain) builds and runs examples/custom_loop.cpp"
