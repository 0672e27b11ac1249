#!/usr/bin/env bash
# The main job from scratch: installs the packages, builds, then runs `zerotrain train` with
# no arguments (trains the built-in tiny model on text that the repo carries, then samples
# from it). Extra arguments go to `zerotrain train`. See lib.sh for ZT_PRESET/ZT_BUILD_DIR.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$ZT_ROOT/scripts/install_deps.sh"
zt_configure_and_build
exec "$(zt_build_dir)/zerotrain" train "$@"
