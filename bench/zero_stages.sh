#!/usr/bin/env bash
# ZeRO stages side by side: `zerotrain train` on 2 MPI ranks (this machine's cores) for
# stages 0-3 on the same small GPT-2 run; prints tokens/s, step time relative to stage 0,
# and the bytes each rank moved through collectives per step (the engine's count) next
# to the theory (stages 1-2 = stage 0's volume, stage 3 = 1.5x).
#   bench/zero_stages.sh [ranks=2] [steps=24]
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
ranks=${1:-2}
steps=${2:-24}
zt_configure_and_build
bin=$(zt_build_dir)/zerotrain
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/run.yaml" <<YAML
model: {preset: tiny-gpt2}
data:
  train: ['$ZT_ROOT/data/text', '$ZT_ROOT/docs', '$ZT_ROOT/README.md']
  seq_len: 128
per_device_train_batch_size: 4
gradient_accumulation_steps: 1
learning_rate: 1.0e-3
max_steps: $steps
save_interval: 0
eval_interval: 0
steps_per_print: $((steps / 2))
seed: 7
YAML
zt_export_mpi_env
threads=$(( $(nproc) / ranks )); (( threads < 1 )) && threads=1
printf '%-6s %10s %12s %14s %12s\n' stage tok/s step-vs-s0 comm/step comm-vs-s0
base_tps=""; base_comm=""
for stage in 0 1 2 3; do
  # The second half of the run (the last log line) excludes start-up.
  line=$(mpirun -np "$ranks" "$bin" train "$work/run.yaml" --output_dir "$work/s$stage" \
           --zero_optimization.stage "$stage" --threads "$threads" 2>/dev/null | grep '^step' | tail -1)
  tps=$(sed -E 's/.*\| +([0-9]+) tok\/s.*/\1/' <<<"$line")
  comm=$(sed -E 's/.*comm ([0-9.]+ [KMG]?i?B)\/step.*/\1/' <<<"$line")
  bytes=$(awk -v c="$comm" 'BEGIN{split(c,a," "); m=1; if(a[2]=="KiB")m=1024; if(a[2]=="MiB")m=1048576; if(a[2]=="GiB")m=1073741824; print a[1]*m}')
  [[ -z $base_tps ]] && base_tps=$tps && base_comm=$bytes
  printf '%-6s %10s %11.2fx %14s %11.2fx\n' "$stage" "$tps" "$(awk -v a="$base_tps" -v b="$tps" 'BEGIN{print a/b}')" "$comm" \
    "$(awk -v a="$bytes" -v b="$base_comm" 'BEGIN{print a/b}')"
done
