#!/usr/bin/env bash
# GPU training step, zerotrain against PyTorch (torch.compile, then eager) in one call on
# the GPU machine: tokens/s, MFU (each against a bf16 GEMM it measures), peak memory, and
# the ratio zerotrain / torch.compile. Needs a CUDA build (bench/gpu.sh makes one).
# With ZT_TORCH_AMP=1 it also runs PyTorch with f32 master weights under autocast
# (torch_gpu_step.py --mode compile-amp: the same 16 bytes of model state per parameter as
# zerotrain, where the default modes keep 8).
#   bench/gpu_train_bench.sh BUILD_DIR [preset=gpt2] [batch=16] [seq=1024] [steps=20]
set -uo pipefail
build=${1:?usage: gpu_train_bench.sh BUILD_DIR [preset] [batch] [seq] [steps]}
preset=${2:-gpt2}
batch=${3:-16}
seq=${4:-1024}
steps=${5:-20}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

result() { sed -nE 's/^RESULT [^ ]+ tokens_per_s=([0-9]+) peak_gib=([0-9.]+).*/\1 \2/p'; }
ours=$("$build/bench/gpu_train_step" --preset "$preset" --batch "$batch" --seq "$seq" --steps "$steps" | tee /dev/stderr | result)
compiled=$(python3 "$root/bench/torch_gpu_step.py" --preset "$preset" --batch "$batch" --seq "$seq" --steps "$steps" --mode compile 2>/dev/null | tee /dev/stderr | result)
eager=$(python3 "$root/bench/torch_gpu_step.py" --preset "$preset" --batch "$batch" --seq "$seq" --steps "$steps" --mode eager 2>/dev/null | tee /dev/stderr | result)
rows=("zerotrain:$ours" "torch.compile:$compiled" "torch eager:$eager")
if [[ ${ZT_TORCH_AMP:-0} == 1 ]]; then
  amp=$(python3 "$root/bench/torch_gpu_step.py" --preset "$preset" --batch "$batch" --seq "$seq" --steps "$steps" --mode compile-amp 2>/dev/null | tee /dev/stderr | result)
  rows+=("compile+autocast:$amp")
fi
printf '%-16s %12s %10s %10s\n' "$preset" tokens/s "peak GiB" "vs compile"
for row in "${rows[@]}"; do
  name=${row%%:*}; vals=${row#*:}
  tps=${vals%% *}; mem=${vals##* }
  base=${compiled%% *}
  ratio=$(awk -v a="${tps:-0}" -v b="${base:-0}" 'BEGIN{ if (b > 0) printf "%.2fx", a / b; else print "-" }')
  printf '%-16s %12s %10s %10s\n' "$name" "${tps:--}" "${mem:--}" "$ratio"
done
