#!/usr/bin/env bash
# GPU generation speed: `zerotrain generate --device cuda` (f32 weights, KV cache) against HF
# transformers' `generate` (bf16 and f32, KV cache) on a Llama-3.2-1B-shaped model with
# random weights, greedy, the same prompt ids, in one call on the GPU machine.
#   bench/gpu_generate.sh BUILD_DIR [new tokens=256] [model dir=/dev/shm/zt-gen-llama]
# Prints one line per runner (tokens/s over prefill + new tokens) and the ratios.
set -euo pipefail
build=${1:?usage: gpu_generate.sh BUILD_DIR [new_tokens] [model_dir]}
new=${2:-256}
dir=${3:-/dev/shm/zt-gen-llama}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=${ZT_PYTHON:-python3}
prompt="The quick brown fox jumps over the lazy dog. Once upon a time"
[[ -f $dir/config.json ]] || "$py" "$root/bench/hf_generate.py" make "$dir"
zt_line=$("$build/zerotrain" generate --model "$dir" --tokenizer bytes --prompt "$prompt" --max-new-tokens "$new" \
  --greedy --ignore-eos --device cuda 2>&1 >/dev/null | grep 'generated' | tail -1)
zt_tps=$(sed -nE 's/.*\(([0-9.]+) tokens\/s.*/\1/p' <<<"$zt_line")
echo "zerotrain-f32: $zt_line"
hf_bf16=$("$py" "$root/bench/hf_generate.py" time "$dir" --prompt "$prompt" --new "$new" --dtype bf16 | tail -1)
hf_f32=$("$py" "$root/bench/hf_generate.py" time "$dir" --prompt "$prompt" --new "$new" --dtype f32 | tail -1)
echo "$hf_bf16"
echo "$hf_f32"
tps() { sed -nE 's/.*"tokens_per_s": ([0-9.]+).*/\1/p' <<<"$1"; }
awk -v z="$zt_tps" -v b="$(tps "$hf_bf16")" -v f="$(tps "$hf_f32")" \
  'BEGIN { printf "tokens/s: zerotrain f32 %.1f, HF bf16 %.1f (ratio %.2fx), HF f32 %.1f (ratio %.2fx)\n", z, b, z / b, f, z / f }'
