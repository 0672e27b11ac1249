#!/usr/bin/env bash
# Several ranks on one GPU: `mpirun -np N zerotrain train --device cuda` with ZeRO stages 1, 2
# and 3, with and without optimizer offload, against the one-rank run's losses.
#
#   staged_zero_check.sh BUILD [device=cuda] [counts="2 4"] [steps=20] [precision] [tol]
#
# On a machine with one GPU the N ranks share it, so the device communicator is the staged
# one (device buffers through pinned host memory over MPI, comm/staged_device_communicator.h):
# each run's log must say so. The one-rank run takes the same micro-batches as gradient
# accumulation (micro-batch 2 and gradient_accumulation_steps N; the loader gives micro-batch
# m of a step the windows rank m gets), so the N-rank run differs from it only in how the
# gradients are summed, as long as the steps stay inside the first epoch (~320 windows here:
# 20 steps of 4 x 2; past an epoch's end the one-rank run drops its partial last batch per
# micro-batch, the N ranks per step). precision: bf16 (f32 master weights; the default on cuda) or f32
# (the default on cpu, how this script is tried without a GPU: CPU ranks over MPI). tol,
# the limit on the max over the steps of |loss - one-rank loss| / one-rank loss: 1e-5 for
# f32 (measured on CPU ranks: 4e-8); 1e-4 for bf16, whose one-rank run adds each
# micro-batch's gradient into the bf16 gradient in one rounding while the ranks' sum rounds
# each rank's gradient to bf16 first (measured on CPU ranks: 2.1e-5 on 2, 2.6e-5 on 4, not
# growing over the steps). Prints a table; exits 1 on a mismatch or a failed run.
set -uo pipefail

build=${1:?usage: staged_zero_check.sh BUILD_DIR [cuda|cpu] [counts] [steps] [tol]}
device=${2:-cuda}
counts=${3:-"2 4"}
steps=${4:-20}
precision=${5:-$([[ $device == cuda ]] && echo bf16 || echo f32)}
default_tol=1e-5
[[ $precision == bf16 ]] && default_tol=1e-4
tol=${6:-$default_tol}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$build/zerotrain
[[ -x $bin ]] || { echo "staged_zero_check.sh: $bin not found (build the zerotrain target first)" >&2; exit 2; }

# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
zt_export_mpi_env
export ZT_COLLECTIVE_TIMEOUT_S=${ZT_COLLECTIVE_TIMEOUT_S:-300}
export NCCL_NVLS_ENABLE=0
[[ $device == cpu ]] && export OMP_NUM_THREADS=1  # the ranks share the cores
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

case $precision in
  bf16) precision_args=(--bf16 true) ;;
  f32) precision_args=() ;;
  *) echo "staged_zero_check.sh: precision '$precision' is not bf16 or f32" >&2; exit 2 ;;
esac
cat >"$work/run.yaml" <<YAML
model: {preset: tiny-gpt2}
data:
  train: ['$root/data/text/artistic.txt', '$root/data/text/apache-2.0.txt', '$root/data/text/gpl-3.txt']
  seq_len: 64
per_device_train_batch_size: 2
learning_rate: 1.0e-3
max_steps: $steps
save_interval: 0
eval_interval: 0
steps_per_print: 1
seed: 7
samples: {tokens: 0}
YAML
common=("$work/run.yaml" --device "$device" "${precision_args[@]}")

# losses DIR: "step loss" per line from DIR/metrics.jsonl.
losses() {
  python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r and not r.get("skipped"):
        print(r["step"], repr(r["loss"]))
PY
}

# max_rel_diff A B: max over the steps of |a - b| / |b|; "inf" when the step lists differ.
max_rel_diff() {
  python3 - "$1" "$2" <<'PY'
import sys
def load(p):
    return {int(s): float(l) for s, l in (line.split() for line in open(p) if line.strip())}
a, b = load(sys.argv[1]), load(sys.argv[2])
print(max((abs(a[s] - b[s]) / abs(b[s]) for s in b), default=float("inf")) if set(a) == set(b) else float("inf"))
PY
}

failed=0
echo "== tiny-gpt2, $device $precision$([[ $precision == bf16 ]] && echo " (f32 master)"), micro-batch 2, $steps steps: N ranks against one rank with N accumulation steps (limit $tol)"
printf '%-6s %-8s %-6s %14s %-7s %s\n' ranks stage offload max-rel-diff check "device communicator"
for n in $counts; do
  ref=$work/one_rank_gas$n
  if ! "$bin" train "${common[@]}" --gradient_accumulation_steps "$n" --output_dir "$ref" >"$ref.log" 2>&1; then
    printf '%-6s %-8s %-6s %14s %-7s\n' 1 "0 (gas $n)" - "run failed" FAIL
    tail -5 "$ref.log" | sed 's/^/    /'
    failed=1
    continue
  fi
  losses "$ref" >"$ref.losses"
  for offload in no yes; do
    for stage in 1 2 3; do
      out=$work/n${n}_s${stage}_$offload
      extra=(--zero_optimization.stage "$stage")
      [[ $offload == yes ]] && extra+=(--zero_optimization.offload_optimizer.device cpu)
      if ! mpirun -np "$n" "$bin" train "${common[@]}" "${extra[@]}" --output_dir "$out" >"$out.log" 2>&1; then
        printf '%-6s %-8s %-6s %14s %-7s\n' "$n" "$stage" "$offload" "run failed" FAIL
        tail -5 "$out.log" | sed 's/^/    /'
        failed=1
        continue
      fi
      losses "$out" >"$out.losses"
      d=$(max_rel_diff "$out.losses" "$ref.losses")
      check=ok
      awk -v v="$d" -v l="$tol" 'BEGIN { exit !(v <= l) }' || { check=FAIL; failed=1; }
      # cuda: the log names the staged communicator (one GPU shared) or NCCL (a GPU per rank).
      comm=$(grep -o 'device communicator: [^(]*([^;]*' "$out.log" | head -1 | sed 's/device communicator: //')
      [[ $device == cpu ]] && comm="(host buffers: MPI)"
      printf '%-6s %-8s %-6s %14.3e %-7s %s\n' "$n" "$stage" "$offload" "$d" "$check" "${comm:-NCCL}"
    done
  done
done
exit $failed
