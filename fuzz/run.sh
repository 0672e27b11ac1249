#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (default 60 s each).
#   fuzz/run.sh [SECONDS]
# With clang (and its libFuzzer runtime: scripts/install_deps.sh installs clang and
# libclang-rt-dev) the targets are coverage-guided libFuzzer binaries with AddressSanitizer,
# built in build/fuzz; otherwise the plain drivers (seeds + random mutations) are built in
# build/fuzz-plain with the default compiler. A crash stops the script non-zero and leaves
# the input as crash-* in the working directory.
set -euo pipefail
seconds=${1:-60}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=${ZT_JOBS:-$(nproc)}
if command -v clang++ >/dev/null && echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
    clang++ -x c++ -fsanitize=fuzzer - -o /tmp/zt_fuzz_probe.$$ 2>/dev/null; then
  rm -f /tmp/zt_fuzz_probe.$$
  build=$repo/build/fuzz
  cmake -S "$repo" -B "$build" -DZT_FUZZ=ON -DZT_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DZT_BUILD_TESTS=OFF -DZT_BUILD_BENCH=OFF >/dev/null
  mode=libfuzzer
else
  build=$repo/build/fuzz-plain
  cmake -S "$repo" -B "$build" -DZT_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release -DZT_BUILD_TESTS=OFF \
    -DZT_BUILD_BENCH=OFF >/dev/null
  mode=plain
fi
targets=()
for src in "$repo"/fuzz/*_fuzz.cpp; do targets+=("$(basename "$src" .cpp)"); done
cmake --build "$build" -j"$jobs" --target "${targets[@]}"
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t
  mkdir -p "$corpus"
  echo "fuzz: $t for $seconds s ($mode)" >&2
  if [ "$mode" = libfuzzer ]; then
    # libFuzzer starts from the corpus; the target's seeds come from a plain run of them.
    "$build/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 "$corpus" "$repo/fuzz/corpus/$t" 2>&1 |
      tail -n 3
  else
    "$build/fuzz/$t" --seconds "$seconds" "$repo/fuzz/corpus/$t"
  fi
done
