#!/usr/bin/env bash
# ZeRO-Offload through the real CLI: `zerotrain train` with a ds_config whose
# zero_optimization has offload_optimizer {device: cpu, ratio r}, against the same run
# without offload, on the GPU machine after a CUDA build (bench/gpu.sh makes one).
#
#   bench/offload.sh BUILD_DIR [preset=gpt2-xl] [micro=8] [seq=1024] [steps=10]
#   ZT_OFFLOAD_STAGE     ZeRO stage of every run (default 2)
#   ZT_OFFLOAD_RATIOS    offload_optimizer.ratio values to run (default "1"; "" none)
#   ZT_OFFLOAD_BASELINE  1 (default): also the run without offload (the ratios' reference)
#   ZT_OFFLOAD_PARAM     1: the offload runs add offload_param {device: cpu} (stage 3)
#   ZT_OFFLOAD_NVME      a folder: offload_optimizer {device: nvme, nvme_path: it} instead of
#                        cpu (buffer_count 4, pipelined reads and writes; ratio as above)
#   ZT_OFFLOAD_COMPARE   N > 0: instead of timing, N steps (steps_per_print 1) with and
#                        without offload (ratio 1 and 0.5), and the plain run twice (the
#                        run-to-run floor); prints the largest relative loss difference
#                        over the steps (bf16 with f32 master: <= 1e-5 required)
#   ZT_OFFLOAD_OUT       where runs write (default a temp folder, removed at the end)
#   ZT_OFFLOAD_TOKENIZER the tokenizer (default GPT-2's; a Llama preset takes a SentencePiece
#                        model, e.g. tests/data/hf/llama2_tokenizer.model)
#   ZT_OFFLOAD_AC        1: activation checkpointing on
#   ZT_OFFLOAD_DEVICE    device of the runs (default cuda; cpu checks the script itself)
#
# Columns: tok/s of the last log line (the second half of the run), GPU peak (the caching
# allocator's high-water mark), host RSS of that line (page-locked staging included), and
# tok/s over the run without offload.
set -uo pipefail
build=${1:?usage: offload.sh BUILD_DIR [preset] [micro] [seq] [steps]}
preset=${2:-gpt2-xl}
micro=${3:-8}
seq=${4:-1024}
steps=${5:-10}
stage=${ZT_OFFLOAD_STAGE:-2}
ratios=${ZT_OFFLOAD_RATIOS-1}
compare=${ZT_OFFLOAD_COMPARE:-0}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
zt=$build/zerotrain
[[ -x $zt ]] || { echo "offload.sh: $zt not found (build first)" >&2; exit 2; }
work=${ZT_OFFLOAD_OUT:-$(mktemp -d)}
mkdir -p "$work"
[[ -n ${ZT_OFFLOAD_OUT:-} ]] || trap 'rm -rf "$work"' EXIT

if ((compare > 0)); then steps=$compare; print_every=1; else print_every=$((steps / 2 > 0 ? steps / 2 : 1)); fi
cat >"$work/run.yaml" <<YAML
model: {preset: gpt2, tokenizer: '${ZT_OFFLOAD_TOKENIZER:-$root/tests/data/gpt2}', activation_checkpointing: $([[ ${ZT_OFFLOAD_AC:-0} == 1 ]] && echo true || echo false)}
data:
  train: ['$root/data/text', '$root/docs', '$root/README.md']
  seq_len: $seq
learning_rate: 1.0e-4
warmup_steps: 0
max_steps: $steps
save_strategy: "no"
eval_interval: 0
steps_per_print: $print_every
seed: 7
samples: {tokens: 0}
device: ${ZT_OFFLOAD_DEVICE:-cuda}
YAML

# The ds_config as a user writes it: bf16, AdamW, clipping 1.0 (DeepSpeed's peer runs use it).
ds_config() {  # ds_config FILE RATIO (empty: no offload)
  local off=""
  if [[ -n $2 && -n ${ZT_OFFLOAD_NVME:-} ]]; then
    off=", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$ZT_OFFLOAD_NVME\", \"buffer_count\": 4,"
    off+=" \"pipeline_read\": true, \"pipeline_write\": true, \"ratio\": $2}"
  elif [[ -n $2 ]]; then
    off=", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true, \"ratio\": $2}"
  fi
  [[ -n $2 && ${ZT_OFFLOAD_PARAM:-0} == 1 ]] && off+=", \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}"
  cat >"$1" <<JSON
{
  "train_micro_batch_size_per_gpu": $micro,
  "gradient_accumulation_steps": 1,
  "bf16": {"enabled": true},
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
  "zero_optimization": {"stage": $stage$off}
}
JSON
}

to_gib() { awk '{ v = $1; u = $2; if (u == "MiB") v /= 1024; else if (u == "KiB") v /= 1048576; else if (u == "B") v /= 1073741824; else if (u == "TiB") v *= 1024; printf "%.2f", v }'; }
last_step_line() { grep -E '^step +[0-9]+/' "$1" | tail -1; }
field_tps() { sed -nE 's/.*\| +([0-9]+) tok\/s.*/\1/p'; }
field_peak() { sed -nE 's/.*gpu peak ([0-9.]+ [KMGT]?i?B).*/\1/p' | to_gib; }
field_rss() { sed -nE 's/.*\| mem ([0-9.]+ [KMGT]?i?B).*/\1/p' | to_gib; }

run_case() {  # run_case LABEL RATIO -> log in $work/LABEL.log, 0 on success
  local label=$1 ratio=$2
  ds_config "$work/$label.json" "$ratio"
  "$zt" train "$work/run.yaml" --deepspeed "$work/$label.json" --model.preset "$preset" \
    --output_dir "$work/out-$label" --overwrite_output_dir >"$work/$label.log" 2>&1
}

failed=0
if ((compare > 0)); then
  echo "== $preset stage $stage bf16 B=$micro T=$seq: $compare steps, losses with and without offload"
  run_case plain "" || { echo "plain run failed:"; tail -5 "$work/plain.log"; exit 1; }
  # The plain run twice: its run-to-run difference is the floor any comparison stands on.
  for r in again 1 0.5; do
    if [[ $r == again ]]; then
      run_case "off$r" "" || { echo "second plain run failed:"; tail -5 "$work/off$r.log"; failed=1; continue; }
    else
      run_case "off$r" "$r" || { echo "offload ratio $r failed:"; tail -5 "$work/off$r.log"; failed=1; continue; }
    fi
    python3 - "$work/out-plain/metrics.jsonl" "$work/out-off$r/metrics.jsonl" "$r" <<'PY' || failed=1
import json, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
steps = sorted(set(a) & set(b))
rel = [abs(a[s] - b[s]) / abs(a[s]) for s in steps]
worst = max(range(len(steps)), key=lambda i: rel[i])
print(("plain run again" if sys.argv[3] == "again" else f"ratio {sys.argv[3]}") + ":"
      f" {len(steps)} steps, loss {a[steps[0]]:.4f} -> {a[steps[-1]]:.4f}; "
      f"max relative difference {rel[worst]:.2e} (step {steps[worst]}); first 5: "
      + " ".join(f"{x:.1e}" for x in rel[:5]))
sys.exit(0 if len(steps) == len(a) and rel[worst] <= 1e-5 else 1)
PY
  done
  exit $failed
fi

printf '\n%-10s %-5s %-6s %10s %9s %9s %8s\n' preset stage ratio tok/s gpuGiB rssGiB vs-plain
base=""
cases=()
[[ ${ZT_OFFLOAD_BASELINE:-1} == 1 ]] && cases+=(plain)
for r in $ratios; do cases+=("$r"); done
for c in "${cases[@]}"; do
  ratio=$c; [[ $c == plain ]] && ratio=""
  label=${c/plain/plain}; [[ $c != plain ]] && label="off$c"
  start=$SECONDS
  if ! run_case "$label" "$ratio"; then
    printf '%-10s %-5s %-6s %10s   (%s)\n' "$preset" "$stage" "${ratio:--}" failed \
      "$(grep -m1 -iE 'error|zerotrain:' "$work/$label.log" | cut -c1-140)"
    failed=1
    continue
  fi
  rm -rf "$work/out-$label"
  line=$(last_step_line "$work/$label.log")
  tps=$(field_tps <<<"$line"); peak=$(field_peak <<<"$line"); rss=$(field_rss <<<"$line")
  [[ $c == plain ]] && base=$tps
  vs="-"
  [[ -n $base && $c != plain ]] && vs=$(awk -v a="$tps" -v b="$base" 'BEGIN { printf "%.3f", a / b }')
  printf '%-10s %-5s %-6s %10s %9s %9s %8s   (%ds)\n' "$preset" "$stage" "${ratio:--}" "$tps" "${peak:--}" \
    "${rss:--}" "$vs" "$((SECONDS - start))"
  grep -m1 'ZeRO-Offload:' "$work/$label.log" | cut -c1-400
done
exit $failed
