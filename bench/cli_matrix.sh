#!/usr/bin/env bash
# The real CLI as the benchmark: `zerotrain train` on the GPU over precision x ZeRO stage x
# activation checkpointing x gradient accumulation, per preset, with tokens/s, MFU and peak
# GPU memory per cell, next to bench/gpu_train_step (the bare step, no trainer loop) for the
# same recipe. Run on the GPU machine after a CUDA build (bench/gpu.sh makes one).
#
#   bench/cli_matrix.sh BUILD_DIR [presets="gpt2-xl llama-3.2-1b"] [micro=8] [seq=1024] [steps=10]
#   ZT_MATRIX_PRECISIONS  default "bf16 fp16"
#   ZT_MATRIX_STAGES      default "0 1 2 3"
#   ZT_MATRIX_AC          activation checkpointing, default "off on"
#   ZT_MATRIX_GAS         gradient_accumulation_steps, default "1 4"
#   ZT_MATRIX_STEP_REF=0  skip the gpu_train_step reference runs
#   ZT_MATRIX_OUT         where runs write (default a temp folder, removed at the end)
#   ZT_MATRIX_DEVICE      device of the runs (default cuda; cpu checks the script itself)
#
# The runs read the repository's text with GPT-2's tokenizer (tests/data/gpt2) and write no
# checkpoint (save_strategy: no; the final model is written, after the measured steps).
# Columns: tok/s and MFU of the run's last log line (steps_per_print = steps / 2: the second
# half of the run, after warm-up); peak = the caching allocator's high-water mark; act =
# peak minus the model state the run's ZeRO line reports (activations, workspaces,
# logits); vs-step = tok/s over gpu_train_step's for the same preset and precision (cells
# without checkpointing should be within 5%); ac-time / ac-act = the checkpointing cell's
# step time and activation memory over the same cell without it.
set -uo pipefail
build=${1:?usage: cli_matrix.sh BUILD_DIR [presets] [micro] [seq] [steps]}
presets=${2:-gpt2-xl llama-3.2-1b}
micro=${3:-8}
seq=${4:-1024}
steps=${5:-10}
precisions=${ZT_MATRIX_PRECISIONS:-bf16 fp16}
stages=${ZT_MATRIX_STAGES:-0 1 2 3}
acs=${ZT_MATRIX_AC:-off on}
gases=${ZT_MATRIX_GAS:-1 4}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
zt=$build/zerotrain
[[ -x $zt ]] || { echo "cli_matrix.sh: $zt not found (build with the CUDA backend first)" >&2; exit 2; }
work=${ZT_MATRIX_OUT:-$(mktemp -d)}
mkdir -p "$work"
[[ -n ${ZT_MATRIX_OUT:-} ]] || trap 'rm -rf "$work"' EXIT

print_every=$((steps / 2 > 0 ? steps / 2 : 1))
cat >"$work/run.yaml" <<YAML
model: {preset: gpt2, tokenizer: '$root/tests/data/gpt2'}
data:
  train: ['$root/data/text', '$root/docs', '$root/README.md']
  seq_len: $seq
learning_rate: 1.0e-4
max_steps: $steps
save_strategy: "no"
eval_interval: 0
steps_per_print: $print_every
seed: 7
samples: {tokens: 0}
device: ${ZT_MATRIX_DEVICE:-cuda}
YAML

# GiB from the log's human-readable sizes ("12.3 GiB", "512.0 MiB").
to_gib() { awk '{ v = $1; u = $2; if (u == "MiB") v /= 1024; else if (u == "KiB") v /= 1048576; else if (u == "B") v /= 1073741824; else if (u == "TiB") v *= 1024; printf "%.2f", v }'; }
last_step_line() { grep -E '^step +[0-9]+/' "$1" | grep -v 'val loss' | tail -1; }
field_tps() { sed -nE 's/.*\| +([0-9]+) tok\/s.*/\1/p'; }
field_mfu() { sed -nE 's/.*MFU +([0-9.]+)%.*/\1/p'; }
field_peak() { sed -nE 's/.*gpu peak ([0-9.]+ [KMGT]?i?B).*/\1/p' | to_gib; }
model_state_gib() { sed -nE 's/.*optimizer state [0-9.]+ [KMGT]?i?B = ([0-9.]+ [KMGT]?i?B).*/\1/p' "$1" | head -1 | to_gib; }

declare -A ref
if [[ ${ZT_MATRIX_STEP_REF:-1} == 1 && -x $build/bench/gpu_train_step ]]; then
  for preset in $presets; do
    for p in $precisions; do
      flag=(); [[ $p == fp16 ]] && flag=(--fp16)
      r=$("$build/bench/gpu_train_step" --preset "$preset" --batch "$micro" --seq "$seq" --steps "$steps" --profile 0 \
            "${flag[@]}" 2>&1 | sed -nE 's/^RESULT [^ ]+ tokens_per_s=([0-9]+).*/\1/p')
      ref[$preset/$p]=${r:-0}
      echo "gpu_train_step $preset $p B=$micro T=$seq: ${r:-failed} tok/s"
    done
  done
fi

printf '\n%-14s %-5s %-5s %-3s %-3s %10s %7s %9s %8s %8s %8s %8s\n' preset prec stage ac gas tok/s MFU% peakGiB actGiB vs-step ac-time ac-act
declare -A tps_of act_of
failed=0
for preset in $presets; do
  for p in $precisions; do
    for stage in $stages; do
      for gas in $gases; do
        for ac in $acs; do
          label="$preset-$p-z$stage-ac$ac-gas$gas"
          log=$work/$label.log
          acflag=false; [[ $ac == on ]] && acflag=true
          start=$SECONDS
          if ! "$zt" train "$work/run.yaml" --model.preset "$preset" --"$p" true --zero_optimization.stage "$stage" \
              --gradient_checkpointing "$acflag" --gradient_accumulation_steps "$gas" \
              --per_device_train_batch_size "$micro" --output_dir "$work/out-$label" --overwrite_output_dir >"$log" 2>&1; then
            printf '%-14s %-5s %-5s %-3s %-3s %10s   (%s)\n' "$preset" "$p" "$stage" "$ac" "$gas" failed \
              "$(grep -m1 -iE 'error|zerotrain:' "$log" | cut -c1-120)"
            failed=1
            continue
          fi
          rm -rf "$work/out-$label"
          line=$(last_step_line "$log")
          tps=$(field_tps <<<"$line"); mfu=$(field_mfu <<<"$line"); peak=$(field_peak <<<"$line")
          state=$(model_state_gib "$log")
          act=$(awk -v a="${peak:-0}" -v b="${state:-0}" 'BEGIN { printf "%.2f", a - b }')
          tps_of[$label]=$tps; act_of[$label]=$act
          vs="-"
          if [[ $ac == off && -n ${ref[$preset/$p]:-} && ${ref[$preset/$p]} != 0 ]]; then
            vs=$(awk -v a="$tps" -v b="${ref[$preset/$p]}" 'BEGIN { printf "%.3f", a / b }')
          fi
          act_t="-" act_m="-"
          off="$preset-$p-z$stage-acoff-gas$gas"
          if [[ $ac == on && -n ${tps_of[$off]:-} ]]; then
            act_t=$(awk -v a="$tps" -v b="${tps_of[$off]}" 'BEGIN { printf "%.3f", b / a }')
            act_m=$(awk -v a="$act" -v b="${act_of[$off]}" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }')
          fi
          printf '%-14s %-5s %-5s %-3s %-3s %10s %7s %9s %8s %8s %8s %8s   (%ds)\n' "$preset" "$p" "$stage" "$ac" "$gas" \
            "$tps" "$mfu" "$peak" "$act" "$vs" "$act_t" "$act_m" "$((SECONDS - start))"
        done
      done
    done
  done
done
exit $failed
