#!/usr/bin/env bash
# Layering check (DESIGN.md): a file under src/<layer>/ may include only its own layer and the
# layers below it. Bottom to top:
#   core backend ops io comm parallel model zero pipeline config checkpoint train cli
# and also:
#   - only src/backend/cuda/ includes backend/cuda/* (everyone else uses backend/cuda_api.h,
#     and ops/ the CUDA-free kernel lists backend/*_kernels.h of both backends),
#     and src/comm/nccl_*: the NCCL transport orders its stream after the compute stream
#     (backend/cuda/context.h) with the backend's Stream/Event types;
#   - core/, ops/, backend/cuda_api.h, backend/*_kernels.h and backend/stub/ include no
#     CUDA, NCCL or MPI header;
#   - no include climbs with "../";
#   - a layer's namespace (zt::<layer>, e.g. zt::config) is opened only in its own folder,
#     so a name's namespace says which folder defines it;
#   - the public API in include/zerotrain/ (next to src/) sits at the train layer: only
#     train/ and cli/ include "zerotrain/...", and its headers include nothing but
#     standard headers and each other (so installing include/ is enough to use them).
# Usage: layering_test.sh [SRC_DIR]   (default: the src/ next to this script's tests/)
set -euo pipefail

src=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/src"}
src=${src%/}
[[ -d $src ]] || { echo "layering: no such directory: $src" >&2; exit 2; }

layers=(core backend ops io comm parallel model zero pipeline config checkpoint train cli)
declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done

gpu_headers='^(cuda[A-Za-z0-9_]*(\.h|/)|cu(blas|blasLt|dnn|rand|fft|sparse|solver|pti)[A-Za-z0-9_]*\.h|cub/|thrust/|nccl[A-Za-z0-9_]*\.h|mpi[A-Za-z0-9_]*\.h|mpi/|nvtx|nvToolsExt|nvml\.h)'

violations=()
checked=0
while IFS= read -r -d '' file; do
  rel=${file#"$src"/}
  layer=${rel%%/*}
  if [[ $rel != */* ]]; then
    violations+=("$rel: a source file directly under src/ (put it in a layer folder)")
    continue
  fi
  if [[ -z ${rank[$layer]+x} ]]; then
    violations+=("$rel: '$layer' is not a layer (known: ${layers[*]})")
    continue
  fi
  own=${rank[$layer]}
  no_gpu=0
  case $rel in core/* | ops/* | backend/cuda_api.h | backend/*_kernels.h | backend/kernel_list.h | backend/stub/*) no_gpu=1 ;; esac
  checked=$((checked + 1))
  lineno=0
  while IFS= read -r line; do
    lineno=$((lineno + 1))
    if [[ $line =~ ^namespace[[:space:]]+zt::([a-z_]+) ]]; then
      ns=${BASH_REMATCH[1]}
      if [[ -n ${rank[$ns]+x} && $ns != "$layer" ]]; then
        violations+=("$rel:$lineno: opens namespace zt::$ns outside src/$ns/ (a layer's code lives in its folder)")
      fi
      continue
    fi
    [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*([\"\<])([^\"\>]+)[\"\>] ]] || continue
    delim=${BASH_REMATCH[1]}
    inc=${BASH_REMATCH[2]}
    where="$rel:$lineno"
    if [[ $inc == *../* ]]; then
      violations+=("$where: relative include \"$inc\" (include from src/: \"layer/file.h\")")
      continue
    fi
    if ((no_gpu)) && [[ $inc =~ $gpu_headers ]]; then
      violations+=("$where: $layer must not include <$inc> (CUDA/NCCL/MPI stay in backend/cuda and comm)")
      continue
    fi
    [[ $delim == '"' ]] || continue
    target=${inc%%/*}
    [[ $target == zerotrain ]] && target=train
    [[ $inc == */* && -n ${rank[$target]+x} ]] || continue
    if ((${rank[$target]} > own)); then
      violations+=("$where: $layer includes \"$inc\" from $target, a layer above it")
    elif [[ $inc == backend/cuda/* && $rel != backend/cuda/* &&
            $rel != comm/nccl_* ]]; then
      violations+=("$where: includes \"$inc\"; outside src/backend/cuda use \"backend/cuda_api.h\"")
    fi
  done <"$file"
done < <(find "$src" -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.cuh' -o -name '*.cpp' \
                               -o -name '*.cc' -o -name '*.cu' \) -print0 | sort -z)

include_dir="$(dirname "$src")/include/zerotrain"
if [[ -d $include_dir ]]; then
  while IFS= read -r -d '' file; do
    rel=include/zerotrain/${file#"$include_dir"/}
    checked=$((checked + 1))
    lineno=0
    while IFS= read -r line; do
      lineno=$((lineno + 1))
      [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*([\"\<])([^\"\>]+)[\"\>] ]] || continue
      inc=${BASH_REMATCH[2]}
      if [[ ${BASH_REMATCH[1]} == '"' && $inc != zerotrain/* ]]; then
        violations+=("$rel:$lineno: public header includes \"$inc\" (installed headers include only <std> and \"zerotrain/...\"; forward-declare or use a pimpl)")
      fi
    done <"$file"
  done < <(find "$include_dir" -type f -name '*.h' -print0 | sort -z)
fi

if ((${#violations[@]})); then
  echo "layering: ${#violations[@]} violation(s) in $checked files (order: ${layers[*]}):"
  printf '  %s\n' "${violations[@]}"
  exit 1
fi
echo "layering: $checked files OK (order: ${layers[*]})"
