#!/usr/bin/env bash
# fp16 `zerotrain train` against PyTorch AMP + GradScaler, DeepSpeed's fp16 recipe in PyTorch
# (fp16 model, f32 master weights) and zerotrain bf16, on GPT-2 124M
# from the same weights and tokens, in one call on the GPU machine (bench/fp16_parity.py
# says how the runs are made comparable). Needs a CUDA build (bench/gpu.sh makes one).
#   bench/fp16_parity.sh BUILD_DIR [steps=50] [initial scale power=24] [preset=gpt2] [device=cuda]
# Prints the step table and PASS/FAIL (exit 1 on FAIL); the runs stay in ZT_PARITY_OUT
# (default a temp folder, removed at the end).
set -euo pipefail
build=${1:?usage: fp16_parity.sh BUILD_DIR [steps] [scale_power] [preset] [device]}
steps=${2:-50}
power=${3:-24}
preset=${4:-gpt2}
device=${5:-cuda}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${ZT_PARITY_OUT:-$(mktemp -d)}
[[ -n ${ZT_PARITY_OUT:-} ]] || trap 'rm -rf "$work"' EXIT
py=${ZT_PYTHON:-python3}

"$py" "$root/bench/fp16_parity.py" prepare "$work" --preset "$preset" --steps "$steps" --scale-power "$power" \
  --device "$device"
echo "== zerotrain fp16 (ds_config fp16 block, hysteresis 1)"
"$build/zerotrain" train "$work/run.yaml" --deepspeed "$work/ds_fp16.json" --output_dir "$work/zt_fp16" --overwrite_output_dir 2>&1 |
  grep -E '^step|error|warn' | tail -n "$((steps + 5))"
echo "== zerotrain bf16"
"$build/zerotrain" train "$work/run.yaml" --bf16 true --output_dir "$work/zt_bf16" --overwrite_output_dir 2>&1 | grep -E '^step|error' | tail -3
echo "== torch AMP fp16 + GradScaler"
"$py" "$root/bench/fp16_parity.py" torch "$work" --mode amp | tail -n "$((steps + 2))"
echo "== torch fp16 model + f32 master weights (DeepSpeed's fp16 recipe)"
"$py" "$root/bench/fp16_parity.py" torch "$work" --mode half | tail -3
echo "== comparison"
"$py" "$root/bench/fp16_parity.py" compare "$work"
