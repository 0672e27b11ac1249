#!/usr/bin/env bash
# bf16 against fp16 on the GPU with the clocks' drift cancelled: the bare training step
# (bench/gpu_train_step) alternates bf16, fp16, bf16, fp16, ... ROUNDS times, and the SM
# clock and power draw are sampled while each run goes. Prints each run and the fp16/bf16
# ratio of the medians. Run on the GPU machine after a CUDA build (bench/gpu.sh).
#
#   bench/precision_ab.sh BUILD_DIR [preset=llama-3.2-1b] [micro=8] [seq=1024] [steps=20] [rounds=3]
set -uo pipefail
build=${1:?usage: precision_ab.sh BUILD_DIR [preset] [micro] [seq] [steps] [rounds]}
preset=${2:-llama-3.2-1b}
micro=${3:-8}
seq=${4:-1024}
steps=${5:-20}
rounds=${6:-3}
step=$build/bench/gpu_train_step
[[ -x $step ]] || { echo "precision_ab.sh: $step not found (build with the CUDA backend first)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run_one() {  # $1 = bf16|fp16; prints "tok/s sm_mhz watts"
  local flag=() smi_pid
  [[ $1 == fp16 ]] && flag=(--fp16)
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 200 >"$work/smi" 2>/dev/null &
  smi_pid=$!
  local r
  r=$("$step" --preset "$preset" --batch "$micro" --seq "$seq" --steps "$steps" --profile 0 "${flag[@]}" 2>&1 |
        sed -nE 's/^RESULT [^ ]+ tokens_per_s=([0-9]+).*/\1/p')
  kill "$smi_pid" 2>/dev/null
  wait "$smi_pid" 2>/dev/null
  # The busy samples only (SM clock above idle): their mean clock and power.
  awk -F', *' -v tps="${r:-0}" '$1 > 1000 { c += $1; p += $2; n++ }
    END { if (n) printf "%s %.0f %.0f\n", tps, c / n, p / n; else printf "%s - -\n", tps }' "$work/smi"
}

declare -a bf fp
printf '%-6s %-5s %10s %8s %7s\n' round prec tok/s sm_MHz watts
for ((i = 1; i <= rounds; i++)); do
  for p in bf16 fp16; do
    read -r tps mhz watts < <(run_one "$p")
    printf '%-6s %-5s %10s %8s %7s\n' "$i" "$p" "$tps" "$mhz" "$watts"
    if [[ $p == bf16 ]]; then bf+=("$tps"); else fp+=("$tps"); fi
  done
done
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
mb=$(median "${bf[@]}")
mf=$(median "${fp[@]}")
awk -v b="$mb" -v f="$mf" -v pre="$preset" 'BEGIN { printf "%s B=%s: median bf16 %s, fp16 %s tok/s: fp16/bf16 %.3f\n", pre, "'"$micro"'", b, f, (b > 0 ? f / b : 0) }'
