#!/usr/bin/env bash
# The main job from scratch: installs the packages, builds, then runs `zerotrain train` with
# no arguments (trains the built-in tiny model on text that the repo carries, then samples
# from it). Extra arguments go to `zerotrain train`. See lib.sh for ZT_PRESET/ZT_BUILD_DIR.
# Builds the zerotrain program only (the tests are test.sh's), with the CPU preset unless a
# GPU is visible or ZT_PRESET says otherwise.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$ZT_ROOT/scripts/install_deps.sh"
if [[ -z ${ZT_PRESET:-} ]] && ! zt_gpu_visible; then
  export ZT_PRESET=cpu
  zt_log "no GPU visible: building the CPU preset (ZT_PRESET=cuda builds the CUDA backend too)"
fi
zt_configure_and_build zerotrain
exec "$(zt_build_dir)/zerotrain" train "$@"
