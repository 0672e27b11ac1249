#!/usr/bin/env bash
# Run on the GPU machine (Ubuntu 24.04, CUDA 13, H100/H200 = sm_90, no network; the packages
# of scripts/install_deps.sh must already be there). Builds with the CUDA backend using all
# cores, runs the GPU tests and prints a table: test, status, seconds. Exits non-zero when
# a test fails. The label `cuda` runs the GPU test binary itself (one process: CTest would
# start one per test case, each paying CUDA's start-up; ~2x slower), with
# ZT_GPU_TEST_FILTER as its --gtest_filter (default: all); any other label goes through
# CTest.
#   ZT_BUILD_DIR   build folder (default build/gpu)
#   ZT_GPU_LABELS  CTest label regex to run (default cuda; '.' runs everything)
#   CUDACXX        nvcc to use (default /usr/local/cuda/bin/nvcc, else the one on PATH)
#   ZT_GPU_BENCH   training-step benchmarks vs PyTorch after the tests, "preset:batch ..."
#   ZT_BENCH_RECIPES     recipes for gpu_train_bench.sh ("bf16 master" = both, each vs its PyTorch twin)
#   ZT_GPU_AUTOTUNE_AB=1 the step with ZT_GEMM_AUTOTUNE=0 and =1 back to back
#   ZT_GPU_TEST_FILTER   --gtest_filter for the GPU tests (default: all)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${ZT_BUILD_DIR:-$root/build/gpu}
labels=${ZT_GPU_LABELS:-cuda}
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
[[ -x $nvcc ]] || nvcc=$(command -v nvcc || true)
[[ -n $nvcc ]] || { echo "gpu.sh: nvcc not found (set CUDACXX)" >&2; exit 1; }
jobs=$(nproc)

echo "== machine"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader ||
  echo "(nvidia-smi failed: the tests will skip)"
"$nvcc" --version | tail -1

echo "== configure + build ($jobs jobs) in $build"
gen=()
if [[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null; then gen=(-G Ninja); fi
start=$SECONDS
cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DZT_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$nvcc"
# The cuda label needs only the GPU tests, the CLI and the step benchmark: build just those
# (device time is scarce); any other label builds everything.
targets=()
[[ $labels == cuda ]] && targets=(--target zt_cuda_tests zerotrain gpu_train_step gpu_op_bench)
cmake --build "$build" -j "$jobs" "${targets[@]}"
echo "built in $((SECONDS - start)) s"

if [[ $labels == cuda ]]; then
  echo "== $build/tests/zt_cuda_tests --gtest_filter='${ZT_GPU_TEST_FILTER:-*}'"
  report=$build/gpu-tests.json
  rm -f "$report"
  set +e
  "$build/tests/zt_cuda_tests" --gtest_filter="${ZT_GPU_TEST_FILTER:-*}" --gtest_output="json:$report" \
    >"$build/gpu-tests.log" 2>&1
  rc=$?
  set -e
  grep -E '^\[  FAILED|Failure|error:' "$build/gpu-tests.log" | head -40 || true
  echo
  echo "== results"
  python3 - "$report" <<'PY'
import collections, json, sys
try:
    report = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit(f"no test report ({e}): the test binary did not finish")
rows = []
for suite in report["testsuites"]:
    for t in suite["testsuite"]:
        status = "Failed" if t.get("failures") else ("Skipped" if t.get("result") == "SKIPPED" else "Passed")
        rows.append((suite["name"] + "." + t["name"], status, float(t.get("time", "0s").rstrip("s"))))
# Every test that did not pass, then the slowest ones (a full list would bury them).
shown = [r for r in rows if r[1] != "Passed"] + sorted((r for r in rows if r[1] == "Passed"), key=lambda r: -r[2])[:15]
print(f"{'test (not passed, then the 15 slowest)':<72} {'status':<8} {'seconds':>8}")
for name, status, secs in shown:
    print(f"{name:<72} {status:<8} {secs:8.2f}")
counts = collections.Counter(r[1] for r in rows)
print(f"{len(rows)} tests, {sum(r[2] for r in rows):.1f} s: " + " ".join(f"{k} {v}" for k, v in sorted(counts.items())))
PY
else
echo "== ctest -L '$labels'"
log=$build/gpu-ctest.log
set +e
# One at a time: the tests share the GPU, and their times are then meaningful.
ctest --test-dir "$build" -L "$labels" --output-on-failure -j 1 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e

echo
echo "== results"
# ctest result lines: "  3/64 Test  #3: Suite.Name ......   Passed    0.12 sec"
#                     "  4/64 Test  #4: Suite.Other .... ***Skipped   0.01 sec"
sed -nE 's/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: +([^ ]+) +\.* *\**([A-Za-z][A-Za-z: ]*[A-Za-z]) +([0-9.]+) sec.*$/\1|\2|\3/p' "$log" |
  awk -F'|' '
    BEGIN { printf "%-64s %-10s %8s\n", "test", "status", "seconds"; n = 0 }
    { printf "%-64s %-10s %8.2f\n", $1, $2, $3; count[$2]++; total += $3; n++ }
    END {
      printf "%d tests, %.1f s:", n, total
      for (s in count) printf " %s %d", s, count[s]
      printf "\n"
    }'
fi
# Per-op times of a step (where the time goes), then the end-to-end training step
# against PyTorch, for each model shape in ZT_GPU_BENCH
# (e.g. "gpt2:16 gpt2-xl:16 llama-3.2-1b:8" = preset:micro-batch; empty: none).
for spec in ${ZT_GPU_BENCH:-}; do
  echo
  echo "== ops of a step ${spec%%:*}, micro-batch ${spec##*:}, T=1024 (bench/gpu_op_bench.cpp)"
  "$build/bench/gpu_op_bench" --preset "${spec%%:*}" --batch "${spec##*:}" --seq 1024 || rc=1
  echo "== training step ${spec%%:*}, micro-batch ${spec##*:}, T=1024 (bench/gpu_train_bench.sh)"
  "$root/bench/gpu_train_bench.sh" "$build" "${spec%%:*}" "${spec##*:}" 1024 20 || rc=1
  if [[ ${ZT_GPU_AUTOTUNE_AB:-0} == 1 ]]; then
    # cuBLASLt autotuning against the heuristic's choice, back to back in this call.
    echo "== GEMM autotuning A/B ${spec%%:*} (ZT_GEMM_AUTOTUNE=0, then 1)"
    for tune in 0 1; do
      ZT_GEMM_AUTOTUNE=$tune "$build/bench/gpu_train_step" --preset "${spec%%:*}" --batch "${spec##*:}" --seq 1024 \
        --steps 20 --profile 0 | grep '^zerotrain' | sed "s/^/autotune=$tune: /" || rc=1
    done
  fi
done
exit "$rc"
