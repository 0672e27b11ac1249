#!/usr/bin/env bash
# Collectives of zerotrain and of PyTorch in one call, on the same ranks, device, sizes and
# dtype: `zerotrain bench comm` under mpirun, bench/torch_comm.py under torch.distributed.run
# (or mpirun where this torch's launcher is broken), then a side-by-side table of bus
# bandwidth per op and size (nccl-tests' busbw; the ratio is zerotrain / torch bandwidth,
# > 1: zerotrain is faster).
#   bench/comm_bench.sh BUILD_DIR [ranks=2] [device=cpu|cuda] [max_bytes=64M] [-- flags for both]
# e.g. bench/comm_bench.sh build/cpu 2 cpu 16M -- --dtype bf16 --iters 10
#   PYTHON   the python3 with torch (default: python3 on PATH if it imports torch, else
#            /usr/bin/python3, Debian's python3-torch)
# Exits non-zero when either side fails or counts a wrong element.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ $# -ge 1 && $1 != -* ]] || { sed -n '2,11p' "${BASH_SOURCE[0]}" >&2; exit 2; }
positional=()
while [[ $# -gt 0 && $1 != -- ]]; do positional+=("$1"); shift; done
[[ ${1:-} == -- ]] && shift
extra=("$@")
build=${positional[0]}
ranks=${positional[1]:-2}
device=${positional[2]:-cpu}
max_bytes=${positional[3]:-64M}
[[ -x $build/zerotrain ]] || { echo "comm_bench.sh: no $build/zerotrain (build it first)" >&2; exit 2; }
[[ $device == cpu || $device == cuda ]] || { echo "comm_bench.sh: device is cpu or cuda, got '$device'" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "comm_bench.sh: mpirun not found (apt-get install openmpi-bin)" >&2; exit 2; }

python=${PYTHON:-}
if [[ -z $python ]]; then
  python=/usr/bin/python3
  if command -v python3 >/dev/null && python3 -c 'import torch' 2>/dev/null; then python=$(command -v python3); fi
fi

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
zt_export_mpi_env
# NVLink multicast (NVLS) stays off on the shared GPU machines; both sides see the same setting.
export NCCL_NVLS_ENABLE=0
# One thread per rank: the ranks share the cores.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} ZT_NUM_THREADS=${ZT_NUM_THREADS:-1}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(--device "$device" --max-bytes "$max_bytes" "${extra[@]}")
mpirun=(mpirun --allow-run-as-root --oversubscribe -np "$ranks")

echo "== zerotrain bench comm (${ranks} ranks, $device)"
zt_rc=0
"${mpirun[@]}" "$build/zerotrain" bench comm "${flags[@]}" --json "$work/zerotrain.json" || zt_rc=$?

# Debian's torch 1.13 on Python 3.11 cannot parse torchrun's own defaults (Std.from_str gives
# None): launch it with mpirun there (torch_comm.py reads OMPI_COMM_WORLD_*).
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if "$python" -c 'import sys; from torch.distributed.elastic.multiprocessing.api import Std; sys.exit(Std.from_str("0") is None)' 2>/dev/null; then
  launcher=("$python" -m torch.distributed.run --nproc_per_node "$ranks" --master_addr 127.0.0.1 --master_port "$port")
  how="torch.distributed.run"
else
  launcher=("${mpirun[@]}" -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" "$python")
  how="mpirun (this torch's torch.distributed.run is broken)"
fi
echo
echo "== PyTorch $("$python" -c 'import torch; print(torch.__version__)') (${ranks} ranks, $device, via $how)"
pt_rc=0
PYTHONWARNINGS=ignore::UserWarning "${launcher[@]}" "$here/torch_comm.py" "${flags[@]}" --json "$work/torch.json" || pt_rc=$?

echo
echo "== side by side (busbw GB/s; ratio = zerotrain / torch bandwidth)"
"$python" - "$work/zerotrain.json" "$work/torch.json" <<'EOF'
import json, math, os, sys

def load(path):
    return json.load(open(path)) if os.path.exists(path) else {"rows": [], "unsupported": {}}

zt, pt = load(sys.argv[1]), load(sys.argv[2])
torch_rows = {(r["op"], r["bytes"]): r for r in pt["rows"]}
if pt.get("notes"):
    for n in pt["notes"]:
        print(f"# torch: {n}")
print(f"{'op':>14}  {'size (B)':>10}  {'zt us':>10}  {'torch us':>10}  {'zt busbw':>9}  {'torch busbw':>11}  {'ratio':>6}")
ratios = {}
for r in zt["rows"]:
    t = torch_rows.get((r["op"], r["bytes"]))
    if t is None:
        why = "n/a" if r["op"] in pt.get("unsupported", {}) else "-"
        print(f"{r['op']:>14}  {r['bytes']:>10}  {r['time_us']:>10.2f}  {why:>10}  {r['busbw_gbs']:>9.3f}  {why:>11}  {why:>6}")
        continue
    # algbw ratio: the same as the busbw ratio at one world size, and defined at n = 1 too.
    ratio = t["time_us"] / r["time_us"] if r["time_us"] > 0 else float("nan")
    ratios.setdefault(r["op"], []).append(ratio)
    print(f"{r['op']:>14}  {r['bytes']:>10}  {r['time_us']:>10.2f}  {t['time_us']:>10.2f}  "
          f"{r['busbw_gbs']:>9.3f}  {t['busbw_gbs']:>11.3f}  {ratio:>6.2f}")
for op, why in pt.get("unsupported", {}).items():
    print(f"# torch {op}: n/a: {why}")
for op, rs in ratios.items():
    geo = math.exp(sum(math.log(x) for x in rs) / len(rs))
    print(f"# {op}: zerotrain / torch bandwidth, geometric mean over {len(rs)} sizes: {geo:.2f}x")
EOF
[[ $zt_rc -eq 0 && $pt_rc -eq 0 ]] || { echo "comm_bench.sh: zerotrain exit $zt_rc, torch exit $pt_rc" >&2; exit 1; }
