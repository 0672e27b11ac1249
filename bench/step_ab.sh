#!/usr/bin/env bash
# A/B of the GPU step between two CUDA builds on one warm machine (say HEAD and a baseline
# commit built beside it from `git archive`): the bare step (bench/gpu_train_step: bf16
# with f32 master weights, the default recipe) and the real `zerotrain train` (bf16, ZeRO
# stage 0, the repository's text with GPT-2's tokenizer), per preset, interleaved NEW/BASE
# over ROUNDS rounds so that drift of the machine falls on both. Prints tok/s per round
# and NEW/BASE ratios; the train figure is the last log line's (steps_per_print = steps/2:
# the second half of the run).
#
#   bench/step_ab.sh NEW_BUILD BASE_BUILD [cases="gpt2-xl:8 llama-3.2-1b:8"] [seq=1024] [steps=10] [rounds=2]
set -uo pipefail
new=${1:?usage: step_ab.sh NEW_BUILD BASE_BUILD [cases] [seq] [steps] [rounds]}
base=${2:?usage: step_ab.sh NEW_BUILD BASE_BUILD [cases] [seq] [steps] [rounds]}
cases=${3:-gpt2-xl:8 llama-3.2-1b:8}
seq=${4:-1024}
steps=${5:-10}
rounds=${6:-2}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/run.yaml" <<YAML
model: {tokenizer: '$root/tests/data/gpt2'}
data: {train: ['$root/data/text', '$root/docs', '$root/README.md'], seq_len: $seq}
learning_rate: 1.0e-4
max_steps: $steps
save_strategy: "no"
eval_interval: 0
steps_per_print: $((steps / 2 > 0 ? steps / 2 : 1))
seed: 7
samples: {tokens: 0}
device: cuda
bf16: true
YAML

bare() {  # BUILD PRESET BATCH -> tok/s
  "$1/bench/gpu_train_step" --preset "$2" --batch "$3" --seq "$seq" --steps "$steps" --profile 0 2>&1 |
    sed -nE 's/^RESULT [^ ]+ tokens_per_s=([0-9]+).*/\1/p'
}
cli() {  # BUILD PRESET BATCH -> tok/s of the last step line
  local log=$work/train.log
  "$1/zerotrain" train "$work/run.yaml" --model.preset "$2" --per_device_train_batch_size "$3" \
    --output_dir "$work/out" --overwrite_output_dir >"$log" 2>&1 || { echo 0; return; }
  grep -E '^step +[0-9]+/' "$log" | grep -v 'val loss' | tail -1 | sed -nE 's/.*\| +([0-9]+) tok\/s.*/\1/p'
  rm -rf "$work/out"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }'; }

printf '%-16s %-6s %-5s %10s %10s %7s\n' case what round new base ratio
for c in $cases; do
  preset=${c%%:*} batch=${c##*:}
  for what in step train; do
    fn=bare; [[ $what == train ]] && fn=cli
    for ((r = 1; r <= rounds; r++)); do
      a=$($fn "$new" "$preset" "$batch"); b=$($fn "$base" "$preset" "$batch")
      printf '%-16s %-6s %-5s %10s %10s %7s\n' "$preset:B$batch" "$what" "$r" "${a:-0}" "${b:-0}" "$(ratio "${a:-0}" "${b:-0}")"
    done
  done
done
