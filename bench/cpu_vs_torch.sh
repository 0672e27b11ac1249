#!/usr/bin/env bash
# Runs the CPU training-step benchmark for zerotrain and PyTorch (Debian's python3-torch)
# in the same call, on the same shape and thread count, and prints the ratio.
#   bench/cpu_vs_torch.sh [BUILD_DIR] [-- extra options for both, e.g. --steps 3]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build/cpu}
shift || true
[ "${1:-}" = "--" ] && shift
threads=${ZT_NUM_THREADS:-$(nproc)}
export OMP_NUM_THREADS=$threads ZT_NUM_THREADS=$threads
zt_out=$("$build/bench/cpu_train_step" "$@")
echo "$zt_out" | grep -v RESULT
torch_out=$(/usr/bin/python3 "$here/torch_cpu_step.py" "$@")
echo "$torch_out" | grep -v RESULT
zt=$(echo "$zt_out" | sed -n 's/RESULT tokens_per_s=//p')
pt=$(echo "$torch_out" | sed -n 's/RESULT tokens_per_s=//p')
python3 -c "print(f'ratio zerotrain / pytorch = {float($zt)/float($pt):.2f}x  ($zt vs $pt tokens/s)')"
