#!/usr/bin/env bash
# GPU training step, zerotrain against PyTorch in one call on the GPU machine: tokens/s,
# MFU (each against a bf16 GEMM it measures), peak memory, and ratios. Needs a CUDA build
# (bench/gpu.sh makes one).
#
# Two recipes, each compared like for like:
#   pure bf16   zerotrain --no-master (bf16 parameters and moments, 8 bytes of model state
#               per parameter)  vs  torch_gpu_step.py --mode compile (the issue's baseline:
#               bf16 model, fused AdamW on bf16 state)
#   f32 master  zerotrain default (f32 master weights and moments, 16 bytes; what DeepSpeed
#               and Accelerate do)  vs  --mode compile-amp (f32 parameters under autocast)
# plus torch eager (pure bf16) as the second baseline.
#   ZT_BENCH_RECIPES  which recipes to run: "bf16 master" (default both)
#   ZT_TORCH_EAGER=0  skip the eager baseline (gpt2-xl eager takes minutes)
#   bench/gpu_train_bench.sh BUILD_DIR [preset=gpt2] [batch=16] [seq=1024] [steps=20]
set -uo pipefail
build=${1:?usage: gpu_train_bench.sh BUILD_DIR [preset] [batch] [seq] [steps]}
preset=${2:-gpt2}
batch=${3:-16}
seq=${4:-1024}
steps=${5:-20}
recipes=${ZT_BENCH_RECIPES:-bf16 master}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
shape=(--preset "$preset" --batch "$batch" --seq "$seq" --steps "$steps")

result() { sed -nE 's/^RESULT [^ ]+ tokens_per_s=([0-9]+) peak_gib=([0-9.]+).*/\1 \2/p'; }
# tee -a: stderr redirected to a file would otherwise be reopened and truncated by every tee.
ours() { "$build/bench/gpu_train_step" "${shape[@]}" "$@" | tee -a /dev/stderr | result; }
torch_step() { python3 "$root/bench/torch_gpu_step.py" "${shape[@]}" --mode "$1" 2>/dev/null | tee -a /dev/stderr | result; }

rows=()
for recipe in $recipes; do
  case $recipe in
    bf16)
      rows+=("zerotrain bf16:$(ours --no-master)")
      compiled=$(torch_step compile)
      rows+=("torch.compile bf16:$compiled" "ratio bf16:")
      ;;
    master)
      rows+=("zerotrain master:$(ours)")
      rows+=("compile+autocast:$(torch_step compile-amp)" "ratio master:")
      ;;
    *) echo "gpu_train_bench.sh: unknown recipe '$recipe' in ZT_BENCH_RECIPES (bf16, master)" >&2; exit 2 ;;
  esac
done
[[ ${ZT_TORCH_EAGER:-1} == 1 ]] && rows+=("torch eager bf16:$(torch_step eager)")

# The table: each "ratio" row divides the two rows above it (ours / PyTorch, same recipe):
# speed as a ratio (>1 = we are faster), memory as a ratio (<1 = we use less).
printf '%-20s %12s %10s\n' "$preset B$batch" tokens/s "peak GiB"
prev2="" prev1=""
for row in "${rows[@]}"; do
  name=${row%%:*}; vals=${row#*:}
  if [[ $name == ratio* ]]; then
    a=${prev2#*:}; b=${prev1#*:}
    awk -v n="$name" -v at="${a%% *}" -v bt="${b%% *}" -v am="${a##* }" -v bm="${b##* }" 'BEGIN {
      if (at > 0 && bt > 0 && am > 0 && bm > 0) printf "%-20s %11.3fx %9.3fx\n", n, at / bt, am / bm
      else printf "%-20s %12s %10s\n", n, "-", "-" }'
  else
    printf '%-20s %12s %10s\n' "$name" "${vals%% *}" "${vals##* }"
  fi
  prev2=$prev1; prev1=$row
done
