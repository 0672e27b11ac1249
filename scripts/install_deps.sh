#!/usr/bin/env bash
# Installs what zerotrain needs to build and test, on Debian 12 / Ubuntu 24.04 (apt).
# Runs as root, or through sudo when it is there. Does nothing when all is installed.
# The CUDA toolkit is not installed here: with /usr/local/cuda/bin/nvcc present the scripts
# also build the CUDA backend.
set -euo pipefail

packages=(
  build-essential      # g++ (with OpenMP), make
  cmake                # >= 3.25
  ninja-build
  pkg-config
  libopenblas-dev      # BLAS for the CPU backend
  libgtest-dev libgmock-dev
  nlohmann-json3-dev   # JSON configs, safetensors headers
  libyaml-cpp-dev      # Accelerate YAML configs
  python3 python3-numpy python3-torch   # PyTorch oracles in the tests
  python3-venv python3-pip              # .venv with PyPI oracles (tokenizers, sentencepiece, safetensors)
  libsentencepiece-dev                  # SentencePiece tokenizer.model files
  libpcre2-dev                          # tokenizer.json Split regexes beyond GPT-2/Llama-3/Qwen2 (optional)
  liburing-dev                          # io_uring for NVMe offload (optional: a thread pool otherwise)
  libopenmpi-dev openmpi-bin             # MPI collectives for host buffers; mpirun for the comm tests
  ccache
  clang libclang-rt-dev                 # libFuzzer for fuzz/run.sh (ZT_FUZZ=ON); gcc stays the compiler
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
# PyPI test oracles in .venv (sees Debian's torch through --system-site-packages).
# Kept small: no PyPI torch (a CUDA build of several GB).
pip_packages=(tokenizers==0.21.1 sentencepiece==0.2.0 safetensors==0.5.3)
setup_venv() {
  local repo venv
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  venv=$repo/.venv
  if [ ! -x "$venv/bin/python3" ]; then
    /usr/bin/python3 -m venv --system-site-packages "$venv"
  fi
  if ! "$venv/bin/python3" -c 'import tokenizers, sentencepiece, safetensors' 2>/dev/null; then
    "$venv/bin/python3" -m pip install -q --disable-pip-version-check "${pip_packages[@]}"
  fi
}

if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#packages[@]} packages are installed" >&2
  setup_venv
  exit 0
fi

sudo=()
if ((EUID != 0)); then
  if command -v sudo >/dev/null; then
    sudo=(sudo)
  else
    echo "install_deps: run as root (no sudo here) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install_deps: installing ${missing[*]}" >&2
start=$SECONDS
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  "${missing[@]}"
echo "install_deps: done in $((SECONDS - start)) s" >&2
setup_venv
