#!/usr/bin/env bash
# The losses of four fixed CPU training runs, printed exactly (every step, as metrics.jsonl
# writes them), for checking that a restructuring leaves the numbers bit for bit where a
# baseline binary puts them:
#   default  the built-in run (examples/default_run.yaml's settings: tiny-gpt2, its own
#            BPE tokenizer) on data/text, 60 steps
#   gpt2     the HF-made tiny GPT-2 (tests/data/hf/gpt2), 50 steps
#   llama    the HF-made tiny Llama 3 (tests/data/hf/llama3), 50 steps
#   qwen2    the HF-made tiny Qwen2 (tests/data/hf/qwen2), 50 steps, 2 micro-batches a step
#   zeroS    (S = 1, 2, 3; with mpirun) the gpt2 run on 2 ranks with ZeRO stage S, 20 steps
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
launcher=()
run() {
  local name=$1
  shift
  "${launcher[@]}" "$bin" train "$@" "${common[@]}" --output_dir "$work/$name" >"$work/$name.log" 2>&1 ||
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

# Every setting is written out: a run config leaves nothing to the defaults of either binary.
settings() {  # NAME MODEL_LINE MAX_STEPS SEQ BATCH LR WARMUP EXTRA...
  local name=$1 model=$2 steps=$3 seq=$4 batch=$5 lr=$6 warmup=$7
  shift 7
  {
    echo "model: $model"
    echo "data: {train: [$root/data/text], validation_fraction: 0.05, seq_len: $seq}"
    echo "per_device_train_batch_size: $batch"
    echo "learning_rate: $lr"
    echo "adam_beta1: 0.9"
    echo "adam_beta2: 0.95"
    echo "adam_epsilon: 1.0e-8"
    echo "weight_decay: 0.1"
    echo "max_grad_norm: 1.0"
    echo "lr_scheduler_type: cosine"
    echo "warmup_steps: $warmup"
    echo "max_steps: $steps"
    echo "eval_interval: 30"
    echo "eval_batches: 2"
    echo "seed: 1337"
    echo "samples: {tokens: 0}"
    for line in "$@"; do echo "$line"; done
  } >"$work/$name.yaml"
}
settings default "{preset: tiny-gpt2}" 60 128 16 2.0e-3 30
settings gpt2 "{path: $root/tests/data/hf/gpt2, tokenizer: $work/tok320}" 50 64 4 3.0e-3 5
settings llama "{path: $root/tests/data/hf/llama3, tokenizer: $work/tok320}" 50 64 4 3.0e-3 5
settings qwen2 "{path: $root/tests/data/hf/qwen2, tokenizer: $work/tok320}" 50 64 4 3.0e-3 5 \
  "gradient_accumulation_steps: 2"
for name in default gpt2 llama qwen2; do run "$name" "$work/$name.yaml"; done

if command -v mpirun >/dev/null; then
  source "$root/scripts/lib.sh"
  zt_export_mpi_env
  launcher=(mpirun -np 2)
  for stage in 1 2 3; do
    sed -e 's/^max_steps: .*/max_steps: 20/' "$work/gpt2.yaml" >"$work/zero$stage.yaml"
    common[1]=1  # --threads 1: two ranks on two cores
    run "zero$stage" "$work/zero$stage.yaml" --zero_optimization.stage "$stage"
  done
fi
