# shellcheck shell=bash
# Shared by the scripts in this folder (source it; not executable on its own).
#   ZT_PRESET     cpu | cuda | debug; default: cuda when /usr/local/cuda/bin/nvcc exists
#                 (the CUDA backend is compiled and linked; GPU tests skip without a GPU),
#                 else cpu; run_default.sh takes cpu too when no GPU is visible (nothing
#                 would run the CUDA code, and the CPU build is the quick one)
#   ZT_BUILD_DIR  build folder; default: the preset's (build/cpu, build/cuda, build/debug)
#   ZT_JOBS       parallel build/test jobs; default: the number of cores

ZT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

zt_log() { printf '==> %s\n' "$*" >&2; }

# OpenMPI jobs in one container with no network fabric (shared memory transports only,
# oversubscribed, allowed as root): the settings tests/CMakeLists.txt gives the comm tests.
zt_export_mpi_env() {
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none \
    OMPI_MCA_osc=^ucx OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}

zt_preset() {
  if [[ -n ${ZT_PRESET:-} ]]; then
    echo "$ZT_PRESET"
  elif [[ -x /usr/local/cuda/bin/nvcc ]]; then
    echo cuda
  else
    echo cpu
  fi
}

# Whether this machine has an NVIDIA GPU the driver shows (nvidia-smi lists one, or the
# driver's /proc entry has one): a CUDA toolkit alone is not a GPU.
zt_gpu_visible() {
  if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then return 0; fi
  compgen -G '/proc/driver/nvidia/gpus/*' >/dev/null
}

zt_build_dir() {
  local dir=${ZT_BUILD_DIR:-build/$(zt_preset)}
  [[ $dir == /* ]] || dir=$ZT_ROOT/$dir
  echo "$dir"
}

zt_jobs() { echo "${ZT_JOBS:-$(nproc 2>/dev/null || echo 2)}"; }

# Configures (once; CMake re-runs itself when needed) and builds the given targets (all
# when none are given). Prints nothing on stdout.
zt_configure_and_build() {
  local preset dir start
  preset=$(zt_preset)
  dir=$(zt_build_dir)
  start=$SECONDS
  local gen=()
  if [[ ! -f $dir/CMakeCache.txt ]] && command -v ninja >/dev/null; then gen=(-G Ninja); fi
  zt_log "configure: preset '$preset' in $dir"
  (cd "$ZT_ROOT" && cmake --preset "$preset" -B "$dir" "${gen[@]}") >&2
  zt_log "build: $(zt_jobs) jobs"
  local targets=()
  (($# > 0)) && targets=(--target "$@")
  cmake --build "$dir" -j "$(zt_jobs)" "${targets[@]}" >&2
  zt_log "configured and built in $((SECONDS - start)) s"
}
