#!/usr/bin/env bash
# Installs the Debian packages Trainyard needs to build and test, skipping
# those already present. Safe to run again. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git python3
  clang libclang-rt-14-dev   # clang build and its ASan/UBSan runtimes
  libjansson-dev             # JSON
  libcmocka-dev              # C unit tests
  libssl-dev                 # SHA-256 (graph hashes, artifacts)
  libdnnl-dev                # oneDNN: the cpu backend's matmul
  libomp-dev                 # OpenMP for clang builds (the cpu backend's kernels)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
