#!/usr/bin/env bash
# Multi-GPU runs of `zerotrain train` under mpirun, one rank per GPU (each rank takes the GPU
# of its local rank; NCCL moves the device buffers). Three modes:
#
#   correctness BUILD [device=cuda] [counts="1 2 4 8"] [steps=50]
#       tiny-gpt2 at a fixed global batch (8 windows: micro-batch 8/n on n ranks) for ZeRO
#       stages 0-3 at each rank count; every run's loss curve against the 1-rank stage-0
#       run (bf16 on cuda: max rel diff <= 3e-2; f32 on cpu: <= 1e-3). Then checkpoints
#       across world sizes: saved at the largest count (stage 2) at step steps/2, resumed at 2
#       ranks (stage 3), and saved at 2 ranks (stage 1), resumed at the largest count
#       (stage 3); each continuation's losses against the uninterrupted run. Exits 1 when a
#       check fails.
#   scaling BUILD [counts="1 2 4 8"] [preset=gpt2-xl] [micro=8] [steps=20]
#       bf16, T=1024: tokens/s per GPU for stages 0-3 at each count (the last log line, i.e.
#       the second half of the run), efficiency against count x the 1-GPU figure, and
#       stage 2 / stage 3 against stage 0 (targets at 8 GPUs: >= 0.95x, >= 0.90x; 8-GPU
#       efficiency >= 90%). On cuda, PyTorch DDP and FSDP2 at the same counts follow
#       (bench/torch_dist_step.py; ZT_TORCH_BASELINES=0 skips them).
#   memory BUILD [gpus=8] [preset=gpt2-xl] [stages="0 1 2 3"] [max_micro=64]
#       bf16, T=1024 on `gpus` ranks: the largest micro-batch that fits per stage (doubling,
#       then bisection; a run that fails is taken as "does not fit"), with its peak GPU
#       memory (metrics.jsonl gpu_peak_bytes) and tokens/s per GPU.
#
# The device `cpu` runs the same jobs on CPU ranks over MPI (how the script itself is
# tested on a machine without GPUs): an argument of correctness, ZT_DEVICE=cpu (and a
# smaller ZT_SEQ, default 1024) for scaling and memory. NVLink multicast stays off (NCCL_NVLS_ENABLE=0): on
# the shared machines a program that uses it can take the host's GPUs out of service.
set -uo pipefail

mode=${1:?usage: multi_gpu.sh correctness|scaling|memory BUILD_DIR [...]}
build=${2:?usage: multi_gpu.sh MODE BUILD_DIR [...]}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$build/zerotrain
[[ -x $bin ]] || { echo "multi_gpu.sh: $bin not found (build the zerotrain target first)" >&2; exit 2; }
shift 2

export NCCL_NVLS_ENABLE=0
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
zt_export_mpi_env
export ZT_COLLECTIVE_TIMEOUT_S=${ZT_COLLECTIVE_TIMEOUT_S:-300}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run NP ARGS...: `zerotrain train` on NP ranks; output in $work/log.* (last run's in $last_log).
run() {
  local np=$1
  shift
  last_log=$work/log.$RANDOM
  mpirun -np "$np" "$bin" train "$@" >"$last_log" 2>&1
}

# losses DIR: the training losses of DIR/metrics.jsonl, "step loss" per line.
losses() {
  python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r and not r.get("skipped"):
        print(r["step"], r["loss"])
PY
}

# max_rel_diff A B: max over the steps both have of |a - b| / |b| ("inf" when they share none).
max_rel_diff() {
  python3 - "$1" "$2" <<'PY'
import sys
def load(p):
    return {int(s): float(l) for s, l in (line.split() for line in open(p) if line.strip())}
a, b = load(sys.argv[1]), load(sys.argv[2])
common = sorted(set(a) & set(b))
print(max((abs(a[s] - b[s]) / abs(b[s]) for s in common), default=float("inf")))
PY
}

# pass_fail VALUE LIMIT: "ok" or "FAIL" (and marks the run as failed).
failed=0
pass_fail() {
  if awk -v v="$1" -v l="$2" 'BEGIN { exit !(v <= l) }'; then echo ok; else failed=1; echo FAIL; fi
}

correctness() {
  local device=${1:-cuda} counts=${2:-"1 2 4 8"} steps=${3:-50}
  local global=8 tol=1e-3 precision=()
  [[ $device == cuda ]] && tol=3e-2 && precision=(--bf16 true)
  [[ $device == cpu ]] && export OMP_NUM_THREADS=1  # ranks share the cores
  cat >"$work/run.yaml" <<YAML
model: {preset: tiny-gpt2}
data:
  train: ['$root/data/text/artistic.txt', '$root/data/text/apache-2.0.txt']
  seq_len: 64
gradient_accumulation_steps: 1
learning_rate: 1.0e-3
max_steps: $steps
save_interval: $((steps / 2))
eval_interval: 0
steps_per_print: 1
seed: 7
samples: {tokens: 0}
YAML
  local common=("$work/run.yaml" --device "$device" "${precision[@]}")
  echo "== correctness: tiny-gpt2, $device${precision:+ bf16}, global batch $global, $steps steps; against 1 rank stage 0 (limit $tol)"
  printf '%-6s %-6s %14s %6s\n' stage ranks max-rel-diff check
  local base=""
  for stage in 0 1 2 3; do
    for n in $counts; do
      local out=$work/s${stage}_n$n
      if ! run "$n" "${common[@]}" --per_device_train_batch_size $((global / n)) --zero_optimization.stage "$stage" \
          --output_dir "$out"; then
        printf '%-6s %-6s %14s %6s\n' "$stage" "$n" "run failed" FAIL
        tail -5 "$last_log" | sed 's/^/    /'
        failed=1
        continue
      fi
      losses "$out" >"$out.losses"
      [[ -z $base ]] && base=$out.losses
      local d
      d=$(max_rel_diff "$out.losses" "$base")
      printf '%-6s %-6s %14.3e %6s\n' "$stage" "$n" "$d" "$(pass_fail "$d" "$tol")"
    done
  done

  local big=0
  for n in $counts; do ((n > big)) && big=$n; done
  ((big >= 2)) || { echo "(checkpoints across world sizes need a count >= 2)"; return; }
  local half=$((steps / 2))
  echo "== checkpoints across world sizes (step $half), continuation against the uninterrupted run"
  printf '%-40s %14s %6s\n' resume max-rel-diff check
  # The uninterrupted runs above saved checkpoints at step `half`.
  local pairs=("$big 2 2 3" "2 1 $big 3")  # "save_ranks save_stage resume_ranks resume_stage"
  for p in "${pairs[@]}"; do
    read -r sn ss rn rs <<<"$p"
    local src=$work/s${ss}_n$sn
    local out=$work/resume_${sn}_${rn}
    local label="$sn ranks stage $ss -> $rn ranks stage $rs"
    # The source run is one of the table's unless its rank count was not in `counts`.
    if [[ ! -f $src.losses ]] && run "$sn" "${common[@]}" --per_device_train_batch_size $((global / sn)) \
        --zero_optimization.stage "$ss" --output_dir "$src"; then
      losses "$src" >"$src.losses"
    fi
    if [[ ! -d $src/checkpoints/global_step$half ]]; then
      printf '%-40s %14s %6s\n' "$label" "no checkpoint" FAIL
      failed=1
      continue
    fi
    if ! run "$rn" "${common[@]}" --per_device_train_batch_size $((global / rn)) --zero_optimization.stage "$rs" \
        --output_dir "$out" --resume "$src/checkpoints/global_step$half"; then
      printf '%-40s %14s %6s\n' "$label" "run failed" FAIL
      tail -5 "$last_log" | sed 's/^/    /'
      failed=1
      continue
    fi
    losses "$out" >"$out.losses"
    local d
    d=$(max_rel_diff "$out.losses" "$src.losses")
    printf '%-40s %14.3e %6s\n' "$label" "$d" "$(pass_fail "$d" "$tol")"
  done
}

# A bf16 T=1024 run config for a preset (the repository's text, read repeatedly).
write_perf_run() {
  local preset=$1 steps=$2 device=${ZT_DEVICE:-cuda}
  [[ $device == cpu ]] && export OMP_NUM_THREADS=1
  cat >"$work/perf.yaml" <<YAML
model: {preset: $preset}
data:
  train: ['$root/data/text', '$root/docs', '$root/README.md']
  seq_len: ${ZT_SEQ:-1024}
gradient_accumulation_steps: 1
learning_rate: 1.0e-4
max_steps: $steps
save_interval: 0
eval_interval: 0
steps_per_print: $((steps / 2))
seed: 7
samples: {tokens: 0}
bf16: $([[ $device == cuda ]] && echo true || echo false)
device: $device
YAML
}

# tok/s of the last log line of $last_log (empty when none).
last_tps() { grep '^step' "$last_log" | tail -1 | sed -nE 's/.*\| +([0-9]+) tok\/s.*/\1/p'; }

scaling() {
  local counts=${1:-"1 2 4 8"} preset=${2:-gpt2-xl} micro=${3:-8} steps=${4:-20}
  write_perf_run "$preset" "$steps"
  echo "== scaling: $preset ${ZT_DEVICE:-cuda} T=${ZT_SEQ:-1024}, micro-batch $micro per GPU, $steps steps (second half measured)"
  printf '%-6s %-6s %14s %12s %12s\n' stage gpus tok/s/gpu efficiency vs-stage0
  declare -A per_gpu
  for stage in 0 1 2 3; do
    local one=""
    for n in $counts; do
      if ! run "$n" "$work/perf.yaml" --per_device_train_batch_size "$micro" --zero_optimization.stage "$stage" \
          --output_dir "$work/perf_s${stage}_n$n"; then
        printf '%-6s %-6s %14s\n' "$stage" "$n" "run failed"
        tail -3 "$last_log" | sed 's/^/    /'
        failed=1
        continue
      fi
      local tps
      tps=$(last_tps)
      local g
      g=$(awk -v t="$tps" -v n="$n" 'BEGIN { printf "%.0f", t / n }')
      per_gpu[$stage,$n]=$g
      [[ -z $one ]] && one=$g
      local eff vs0="-"
      eff=$(awk -v g="$g" -v o="$one" 'BEGIN { printf "%.1f%%", 100 * g / o }')
      [[ -n ${per_gpu[0,$n]:-} ]] && vs0=$(awk -v g="$g" -v z="${per_gpu[0,$n]}" 'BEGIN { printf "%.2fx", g / z }')
      printf '%-6s %-6s %14s %12s %12s\n' "$stage" "$n" "$g" "$eff" "$vs0"
    done
  done
  [[ ${ZT_DEVICE:-cuda} == cuda && ${ZT_TORCH_BASELINES:-1} == 1 ]] || return 0
  echo "== PyTorch at the same counts (bf16 autocast over f32 parameters, fused AdamW)"
  printf '%-8s %-6s %14s %12s %12s\n' mode gpus tok/s/gpu peak-GiB "vs ZeRO-0"
  for mode in ddp fsdp2; do
    for n in $counts; do
      local line
      line=$(python3 -m torch.distributed.run --standalone --nproc_per_node "$n" "$root/bench/torch_dist_step.py" \
               --preset "$preset" --batch "$micro" --seq "${ZT_SEQ:-1024}" --steps "$steps" --mode "$mode" 2>&1 |
             sed -nE 's/^RESULT .* tokens_per_s_per_gpu=([0-9]+) peak_gib=([0-9.]+).*/\1 \2/p')
      if [[ -z $line ]]; then
        printf '%-8s %-6s %14s\n' "$mode" "$n" "run failed"
        continue
      fi
      read -r g peak <<<"$line"
      local vs="-"
      [[ -n ${per_gpu[0,$n]:-} ]] && vs=$(awk -v z="${per_gpu[0,$n]}" -v g="$g" 'BEGIN { printf "%.2fx", z / g }')
      printf '%-8s %-6s %14s %12s %12s\n' "$mode" "$n" "$g" "$peak" "$vs"
    done
  done
}

# fits NP STAGE MICRO: a 4-step run fits in memory (and prints its peak and tok/s to $fit_line).
fits() {
  local np=$1 stage=$2 micro=$3
  local out=$work/mem_s${stage}_m$micro
  rm -rf "$out"
  run "$np" "$work/perf.yaml" --per_device_train_batch_size "$micro" --zero_optimization.stage "$stage" \
    --output_dir "$out" || return 1
  fit_line=$(python3 - "$out/metrics.jsonl" "$np" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in rows if "tokens_per_s" in r]
peak = max((r.get("gpu_peak_bytes") or 0) for r in rows) / 2**30
print(f"{peak:.2f} {rows[-1]['tokens_per_s'] / int(sys.argv[2]):.0f}")
PY
)
}

memory() {
  local gpus=${1:-8} preset=${2:-gpt2-xl} stages=${3:-"0 1 2 3"} max_micro=${4:-64}
  write_perf_run "$preset" 4
  echo "== memory: $preset ${ZT_DEVICE:-cuda} T=${ZT_SEQ:-1024} on $gpus ranks: the largest micro-batch that fits per stage"
  printf '%-6s %10s %14s %12s\n' stage micro peak-GiB tok/s/gpu
  for stage in $stages; do
    local lo=0 hi=1 best=""
    # Doubling until a run fails (or max_micro), then bisection between the last fit and it.
    while ((hi <= max_micro)) && fits "$gpus" "$stage" "$hi"; do
      lo=$hi
      best=$fit_line
      hi=$((hi * 2))
    done
    ((hi > max_micro)) && hi=$((max_micro + 1))
    while ((hi - lo > 1)); do
      local mid=$(((lo + hi) / 2))
      if fits "$gpus" "$stage" "$mid"; then lo=$mid; best=$fit_line; else hi=$mid; fi
    done
    if ((lo == 0)); then
      printf '%-6s %10s %14s %12s\n' "$stage" "none" "-" "-"
    else
      read -r peak tps <<<"$best"
      printf '%-6s %10s %14s %12s\n' "$stage" "$lo" "$peak" "$tps"
    fi
  done
}

case $mode in
  correctness) correctness "$@" ;;
  scaling) scaling "$@" ;;
  memory) memory "$@" ;;
  *) echo "multi_gpu.sh: unknown mode '$mode' (correctness, scaling or memory)" >&2; exit 2 ;;
esac
exit "$failed"
