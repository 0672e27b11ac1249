#!/usr/bin/env bash
# LoRA fine-tuning through the real `zerotrain train` (issue 20's performance table), the
# shapes and settings of bench/peers/peft_lora_step.py: Llama shapes from a config.json
# (random base weights: the speed does not depend on them), bf16 (16-bit frozen base; the
# adapters' f32 master and moments), LoRA r 16, alpha 32, dropout 0 on q/k/v/o/gate/up/down,
# T = 2048, AdamW, clipping 1.0.
#
#   bench/lora.sh ZEROTRAIN CASE [CASE ...]
#   CASE       llama1b:B (Llama-3.2-1B's shape) or llama8b:B (Llama-3-8B's), micro-batch B;
#              append :ac for activation checkpointing
#   ZT_LORA_SEQ     sequence length (default 2048)
#   ZT_LORA_STEPS   steps (default 12; the last log line covers the second half)
#   ZT_LORA_DEVICE  cuda (default) or cpu (to check the script itself on a tiny case)
#   ZT_LORA_SHAPE   a JSON fragment overriding the shape (e.g. '"num_hidden_layers": 1')
#   ZT_LORA_DATA    text (default: the repo's text files) or sft-packed / sft-padded: prompt/
#                   response records made from the same text (a paragraph's prompt, the next
#                   ones as its response), data.packing true / false
#
# Prints per case: the model line, the last step line (tok/s, MFU, GPU peak) and a RESULT
# line with the tokens/s and GPU peak of that line.
set -uo pipefail
Z=${1:?usage: lora.sh ZEROTRAIN CASE [CASE ...]}
shift
R=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
T=${ZT_LORA_SEQ:-2048}
S=${ZT_LORA_STEPS:-12}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
DATA=${ZT_LORA_DATA:-text}
case $DATA in
  text) train="['$R/data/text', '$R/docs', '$R/README.md']"; packing="" ;;
  sft-packed|sft-padded)
    # Samples of a few hundred tokens: a paragraph as the prompt, the next three as the response.
    python3 - "$R" "$W/sft.jsonl" <<'PY' || exit 1
import json, pathlib, sys
root, out = pathlib.Path(sys.argv[1]), sys.argv[2]
files = sorted((root / "data/text").iterdir()) + sorted((root / "docs").glob("*.md"))
paras = [p.strip() for f in files for p in f.read_text(errors="replace").split("\n\n") if p.strip()]
with open(out, "w") as o:
    for i in range(0, len(paras) - 4, 4):
        o.write(json.dumps({"prompt": paras[i], "response": "\n\n".join(paras[i + 1:i + 4])}) + "\n")
PY
    train="['$W/sft.jsonl']"; packing=", packing: $([[ $DATA == sft-packed ]] && echo true || echo false)" ;;
  *) echo "lora.sh: ZT_LORA_DATA must be text, sft-packed or sft-padded, got '$DATA'" >&2; exit 2 ;;
esac
for case in "$@"; do
  IFS=: read -r shape B ac <<<"$case"
  case $shape in
    llama1b) dims='"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "tie_word_embeddings": true' ;;
    llama8b) dims='"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "tie_word_embeddings": false' ;;
    *) echo "lora.sh: unknown shape '$shape' (llama1b, llama8b)" >&2; exit 2 ;;
  esac
  [[ -n ${ZT_LORA_SHAPE:-} ]] && dims="$dims, $ZT_LORA_SHAPE"
  cat >"$W/config.json" <<JSON
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", $dims, "num_attention_heads": 32,
 "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-05,
 "rope_theta": 500000.0, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2}
JSON
  cat >"$W/run.yaml" <<YAML
model: {config: $W/config.json, tokenizer: '$R/tests/data/hf/llama2_tokenizer.model', activation_checkpointing: $([[ $ac == ac ]] && echo true || echo false)}
data: {train: $train, seq_len: $T$packing}
lora: {r: 16, alpha: 32, dropout: 0.0, target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}
bf16: true
per_device_train_batch_size: $B
learning_rate: 1.0e-4
max_grad_norm: 1.0
max_steps: $S
save_strategy: "no"
eval_interval: 0
steps_per_print: $((S / 2))
seed: 7
samples: {tokens: 0}
device: ${ZT_LORA_DEVICE:-cuda}
YAML
  rm -rf "$W/out"
  "$Z" train "$W/run.yaml" --output_dir "$W/out" >"$W/log" 2>&1
  rc=$?
  echo "== $case (T=$T, data $DATA): rc $rc"
  grep -E "model:|LoRA|lora|SFT data|error" "$W/log" | cut -c1-300 | head -7
  last=$(grep -E "^step.*tok/s" "$W/log" | tail -1)
  echo "$last"
  tps=$(sed -nE 's/.*\| +([0-9.]+) tok\/s.*/\1/p' <<<"$last")
  peak=$(sed -nE 's/.*gpu peak ([0-9.]+) GiB.*/\1/p' <<<"$last")
  echo "RESULT zerotrain case=$case data=$DATA tokens_per_s=${tps:-?} gpu_peak_gib=${peak:-?}"
done
