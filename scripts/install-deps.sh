#!/usr/bin/env bash
# Installs the Debian packages Trainyard needs to build and test, skipping
# those already present. Safe to run again. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git python3
  clang libclang-rt-14-dev   # clang build and its ASan/UBSan runtimes
  libjansson-dev             # JSON
  libmicrohttpd-dev          # HTTP server of `trainyard serve`
  curl                       # the serve tests drive the server with curl too
  gdb                        # the tests print the stacks of a command that hangs
  strace                     # the checkpoint test traces a save's fsync/rename order
  libpcre2-dev               # tokenizer.json pre-tokenizer patterns (UTF, UCP, JIT)
  libcmocka-dev              # C unit tests
  libssl-dev                 # SHA-256 (graph hashes, artifacts)
  libdnnl-dev                # oneDNN: the cpu backend's matmul
  libomp-dev                 # OpenMP for clang builds (the cpu backend's kernels)
  opencl-c-headers ocl-icd-opencl-dev  # the opencl backend: Khronos headers, ICD loader
  pocl-opencl-icd            # PoCL, the CPU OpenCL driver its tests run on
  libopenmpi-dev openmpi-bin # data parallel: Open MPI (the shim libty_mpi.so links it; mpirun)
  fortunes fortunes-min      # the default training corpus (scripts/corpus.sh)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  if [ -n "$sudo" ] && ! command -v sudo >/dev/null; then
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python packages of the interoperability tests, from PyPI, for whichever
# python3 comes first on PATH (the one CMake finds; e.g. a pyenv
# interpreter). Without them those tests are reported as skipped, so a
# failure here is a warning. Each group installs on its own, so one that
# fails does not take the others' tests with it.
#   safetensors numpy: the reference safetensors implementation (tests/models)
#   tokenizers: Hugging Face tokenizers; our trained tokenizer.json files must
#     encode alike there (tests/apps)
#   jinja2: renders Hugging Face chat templates as transformers does, the
#     reference of models/chat_template (tests/models)
#   openai: the official OpenAI client (and its dependencies: httpx, pydantic,
#     anyio, ...), which the `trainyard serve` tests drive the server with
#   tensorboard: reads our event files (tests/apps/metrics); binary wheels
#     only (grpcio, protobuf, werkzeug, markdown, pillow, absl-py,
#     tensorboard-data-server), about 80 MB beyond numpy, seconds to install
#   torch transformers: transformers.Adafactor, the reference of
#     `--optimizer adafactor` (tests/apps/test_adafactor_hf.py), run on the
#     CPU. PyPI has no CPU-only torch wheel for x86-64 Linux (those live on
#     PyTorch's own index, which this machine does not reach): its wheel
#     brings NVIDIA's CUDA libraries along (about 3 GB, a minute or two to
#     install), which nothing here loads.
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
pip_ready=0
pip_install_group() { # MODULES PACKAGES...: imports to check, then what to install
  local modules=$1
  shift
  if python3 -c "import $modules" 2>/dev/null; then
    echo "install-deps: python packages present: $*"
    return
  fi
  if [ $pip_ready -eq 0 ] && ! python3 -m pip --version >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends python3-pip || true
  fi
  pip_ready=1
  echo "install-deps: pip installing $* for $(command -v python3)"
  local pip_log
  pip_log=$(mktemp)
  if ! python3 -m pip install --quiet "$@" 2>"$pip_log"; then
    # A Debian-managed interpreter refuses (PEP 668) unless told otherwise;
    # only then is --break-system-packages used.
    if grep -q "externally-managed-environment" "$pip_log"; then
      python3 -m pip install --quiet --break-system-packages "$@" 2>"$pip_log" ||
        { cat "$pip_log" >&2; echo "install-deps: warning: could not install $*; their tests will be skipped" >&2; }
    else
      cat "$pip_log" >&2
      echo "install-deps: warning: could not install $*; their tests will be skipped" >&2
    fi
  fi
  rm -f "$pip_log"
}
pip_install_group "safetensors, numpy" safetensors numpy
pip_install_group "tensorboard.backend.event_processing.event_accumulator" tensorboard
pip_install_group "tokenizers" tokenizers
pip_install_group "torch, transformers.optimization" torch transformers
pip_install_group "jinja2" jinja2
pip_install_group "openai" openai
