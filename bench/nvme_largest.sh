#!/usr/bin/env bash
# ZeRO-Infinity's size test (issue 18): llama-2-7b's shape with LAYERS layers, from a config.json
# (no preset), stage 3 with the 16-bit parameters and the optimizer state on NVMe (max_in_cpu 0:
# nothing kept in host memory), bf16, activation checkpointing, B=4, T=1024, through the real
# `zerotrain train`. Prints the step lines (nvme read/write GB/s over each step), the peak host
# RSS and the most disk the run used.
#
#   bench/nvme_largest.sh ZEROTRAIN LAYERS [STEPS=2] [NVME_PATH=/tmp/nvme]
#   ZT_NVL_TIMEOUT   seconds the run may take (default 330)
#   ZT_NVL_DEVICE    cuda (default) or cpu (to check the script itself with 1 layer)
#   ZT_NVL_OUT       the run's output_dir (default inside a temp folder on the same disk;
#                    /dev/shm/... keeps the final model off a disk the swap fills)
#   ZT_NVL_AIO       the aio section (default: 4M blocks, depth 32, 4 threads: the best
#                    `zerotrain bench io` settings on the GPU machine's disk)
#
# Disk needed: 14 bytes per parameter (12 of f32 master + moments, 2 of bf16 parameters);
# 20 layers = 4.31B parameters = 56 GiB.
set -uo pipefail
Z=${1:?usage: nvme_largest.sh ZEROTRAIN LAYERS [STEPS] [NVME_PATH]}
L=${2:?layers}
S=${3:-2}
NV=${4:-/tmp/nvme}
R=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$NV"
aio=${ZT_NVL_AIO:-'{"block_size": 4194304, "queue_depth": 32, "thread_count": 4}'}
cat >"$W/config.json" <<JSON
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
 "num_attention_heads": 32, "num_key_value_heads": 32, "num_hidden_layers": $L, "vocab_size": 32000,
 "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false,
 "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2}
JSON
cat >"$W/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "bf16": {"enabled": true}, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.0}},
 "zero_optimization": {"stage": 3, "sub_group_size": 100000000,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$NV", "buffer_count": 4, "pipeline_read": true, "pipeline_write": true},
   "offload_param": {"device": "nvme", "nvme_path": "$NV", "buffer_count": 5, "buffer_size": 210000000, "max_in_cpu": 0}},
 "aio": $aio}
JSON
cat >"$W/run.yaml" <<YAML
model: {config: $W/config.json, tokenizer: '$R/tests/data/hf/llama2_tokenizer.model', activation_checkpointing: true}
data: {train: ['$R/data/text', '$R/docs', '$R/README.md'], seq_len: 1024}
max_steps: $S
save_strategy: "no"
eval_interval: 0
steps_per_print: 1
seed: 7
samples: {tokens: 0}
device: ${ZT_NVL_DEVICE:-cuda}
YAML
"$Z" train "$W/run.yaml" --deepspeed "$W/ds.json" --output_dir "${ZT_NVL_OUT:-$W/out}" >"$W/log" 2>&1 &
pid=$!
rss_max=0 disk_max=0 start=$SECONDS
while kill -0 $pid 2>/dev/null; do
  rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status 2>/dev/null || echo 0)
  disk=$(du -sk "$NV" 2>/dev/null | cut -f1)
  ((rss > rss_max)) && rss_max=$rss
  ((${disk:-0} > disk_max)) && disk_max=$disk
  if ((SECONDS - start > ${ZT_NVL_TIMEOUT:-330})); then kill $pid; echo "timed out"; fi
  sleep 2
done
wait $pid
rc=$?
echo "rc $rc"
grep -E "^step|ready in|NVMe|nvme|ZeRO stage|error" "$W/log" | cut -c1-330 | head -20
awk -v r=$rss_max -v d=$disk_max 'BEGIN { printf "peak host RSS %.1f GiB; most disk used under nvme_path %.1f GiB\n", r / 1048576, d / 1048576 }'
exit $rc
