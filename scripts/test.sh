#!/usr/bin/env bash
# Configures, builds and runs every test:   ./scripts/test.sh [ctest args, e.g. -L unit]
# Preset: cuda when /usr/local/cuda/bin/nvcc exists (GPU tests then skip without a GPU),
# else cpu; override with ZT_PRESET=cpu|cuda|debug and ZT_BUILD_DIR=... (see lib.sh).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

zt_configure_and_build
zt_log "test: ctest -j $(zt_jobs) $*"
exec ctest --test-dir "$(zt_build_dir)" --output-on-failure -j "$(zt_jobs)" "$@"
