#!/usr/bin/env bash
# bf16 against fp16 on the GPU with the clocks' drift cancelled: the bare training step
# (bench/gpu_train_step) alternates bf16, fp16, bf16, fp16, ... ROUNDS times, and the SM
# clock and power draw are sampled while each run goes. Prints each run and the fp16/bf16
# ratio of the medians. Run on the GPU machine after a CUDA build (bench/gpu.sh).
#
#   bench/precision_ab.sh BUILD_DIR [preset=llama-3.2-1b] [micro=8] [seq=1024] [steps=20] [rounds=3]
#   ZT_AB_CLI=1   time the real CLI instead: each run is one `zerotrain train` cell of
#                 bench/cli_matrix.sh (ZeRO 0, no checkpointing, gas 1; tok/s of the second half)
#                 and the GPU peak is printed too
set -uo pipefail
build=${1:?usage: precision_ab.sh BUILD_DIR [preset] [micro] [seq] [steps] [rounds]}
preset=${2:-llama-3.2-1b}
micro=${3:-8}
seq=${4:-1024}
steps=${5:-20}
rounds=${6:-3}
step=$build/bench/gpu_train_step
cli=${ZT_AB_CLI:-0}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ $cli == 1 ]]; then
  [[ -x $build/zerotrain ]] || { echo "precision_ab.sh: $build/zerotrain not found (build with the CUDA backend first)" >&2; exit 2; }
else
  [[ -x $step ]] || { echo "precision_ab.sh: $step not found (build with the CUDA backend first)" >&2; exit 2; }
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One run of the chosen kind; prints "tok/s peak_GiB" (peak "-" for the bare step).
measure() {
  if [[ $cli == 1 ]]; then
    ZT_MATRIX_PRECISIONS=$1 ZT_MATRIX_STAGES=0 ZT_MATRIX_AC=off ZT_MATRIX_GAS=1 ZT_MATRIX_STEP_REF=0 \
      "$here/cli_matrix.sh" "$build" "$preset" "$micro" "$seq" "$steps" 2>&1 |
      awk -v pre="$preset" '$1 == pre && $6 ~ /^[0-9]+$/ { print $6, $8; found = 1 } END { if (!found) print 0, "-" }'
  else
    local flag=()
    [[ $1 == fp16 ]] && flag=(--fp16)
    local r
    r=$("$step" --preset "$preset" --batch "$micro" --seq "$seq" --steps "$steps" --profile 0 "${flag[@]}" 2>&1 |
          sed -nE 's/^RESULT [^ ]+ tokens_per_s=([0-9]+).*/\1/p')
    echo "${r:-0} -"
  fi
}

run_one() {  # $1 = bf16|fp16; prints "tok/s peak sm_mhz watts"
  local smi_pid
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 200 >"$work/smi" 2>/dev/null &
  smi_pid=$!
  local r peak
  read -r r peak < <(measure "$1")
  kill "$smi_pid" 2>/dev/null
  wait "$smi_pid" 2>/dev/null
  # The busy samples only (SM clock above idle): their mean clock and power.
  awk -F', *' -v tps="${r:-0}" -v peak="${peak:--}" '$1 > 1000 { c += $1; p += $2; n++ }
    END { if (n) printf "%s %s %.0f %.0f\n", tps, peak, c / n, p / n; else printf "%s %s - -\n", tps, peak }' "$work/smi"
}

declare -a bf fp
printf '%-6s %-5s %10s %8s %8s %7s\n' round prec tok/s peakGiB sm_MHz watts
for ((i = 1; i <= rounds; i++)); do
  for p in bf16 fp16; do
    read -r tps peak mhz watts < <(run_one "$p")
    printf '%-6s %-5s %10s %8s %8s %7s\n' "$i" "$p" "$tps" "$peak" "$mhz" "$watts"
    if [[ $p == bf16 ]]; then bf+=("$tps"); else fp+=("$tps"); fi
  done
done
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
mb=$(median "${bf[@]}")
mf=$(median "${fp[@]}")
awk -v b="$mb" -v f="$mf" -v pre="$preset" 'BEGIN { printf "%s B=%s%s: median bf16 %s, fp16 %s tok/s: fp16/bf16 %.3f\n", pre, "'"$micro"'", "'"$([[ $cli == 1 ]] && echo ' (zerotrain train)')"'", b, f, (b > 0 ? f / b : 0) }'
