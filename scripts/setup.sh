#!/usr/bin/env bash
# Installs the packages and builds (no tests run). The binary is then
# build/<preset>/zerotrain; see lib.sh for ZT_PRESET/ZT_BUILD_DIR.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$ZT_ROOT/scripts/install_deps.sh"
zt_configure_and_build
echo "$(zt_build_dir)/zerotrain"
