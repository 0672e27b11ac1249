#!/usr/bin/env bash
# The losses of four fixed CPU training runs, printed exactly (every step, as metrics.jsonl
# writes them), for checking that a restructuring leaves the numbers bit for bit where a
# baseline binary puts them:
#   default  the built-in run (examples/default_run.yaml's settings: tiny-gpt2, its own
#            BPE tokenizer) on data/text, 60 steps
#   gpt2     the HF-made tiny GPT-2 (tests/data/hf/gpt2), 50 steps
#   llama    the HF-made tiny Llama 3 (tests/data/hf/llama3), 50 steps
#   qwen2    the HF-made tiny Qwen2 (tests/data/hf/qwen2), 50 steps, ZeRO-2 settings
# Every run reads the same files from this checkout, so two binaries (say HEAD and an older
# commit built beside it) see the same data:
#   tools/loss_fingerprint.sh build/cpu/zerotrain > head.txt
#   tools/loss_fingerprint.sh /path/to/old/zerotrain > base.txt
#   cmp head.txt base.txt
# Threads are fixed (--threads 2): the CPU kernels' sums are deterministic for a given
# thread count.
set -euo pipefail

bin=$(realpath "${1:?usage: loss_fingerprint.sh ZEROTRAIN_BINARY}")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/zt-loss-fingerprint.XXXXXX")
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/tok320"
"$bin" tokenizer train --vocab-size 320 --out "$work/tok320/tokenizer.json" "$root"/data/text/* >/dev/null

common=(--threads 2 --logging_steps 1 --overwrite_output_dir --save_steps 0 --log-level warn)
hf_run=(--data.train "$root/data/text" --model.tokenizer "$work/tok320" --data.seq_len 64
        --per_device_train_batch_size 4 --max_steps 50 --learning_rate 3e-3 --warmup_steps 5
        --lr_scheduler_type cosine --max_grad_norm 1.0 --seed 7)

run() {
  local name=$1
  shift
  "$bin" train "$@" "${common[@]}" --output_dir "$work/$name" >"$work/$name.log" 2>&1 ||
    { echo "$name: exit $?" >&2; tail -5 "$work/$name.log" >&2; exit 1; }
  python3 - "$name" "$work/$name/metrics.jsonl" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
for line in open(path):
    r = json.loads(line)
    if "loss" in r and "step" in r:
        print(name, r["step"], repr(r["loss"]), repr(r.get("grad_norm")))
PY
}

cat >"$work/default.yaml" <<EOF
model: {preset: tiny-gpt2}
data: {train: [$root/data/text], validation_fraction: 0.05, seq_len: 128}
per_device_train_batch_size: 16
learning_rate: 2.0e-3
adam_beta2: 0.95
weight_decay: 0.1
max_grad_norm: 1.0
lr_scheduler_type: cosine
warmup_steps: 30
max_steps: 60
eval_interval: 30
eval_batches: 2
seed: 1337
EOF
run default "$work/default.yaml"
run gpt2 --model.path "$root/tests/data/hf/gpt2" "${hf_run[@]}"
run llama --model.path "$root/tests/data/hf/llama3" "${hf_run[@]}"
run qwen2 --model.path "$root/tests/data/hf/qwen2" "${hf_run[@]}" --gradient_accumulation_steps 2
