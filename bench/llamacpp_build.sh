#!/usr/bin/env bash
# Builds llama.cpp's llama-batched-bench for CUDA on sm_90 (H100/H200): the
# llamacpp peer of bench/serve_bench.py (--peer llamacpp --llamacpp-dir SRC).
# Usage: bench/llamacpp_build.sh SRC [JOBS]
#   SRC   a llama.cpp source folder (e.g. `fetch github:ggml-org/llama.cpp`,
#         checked out); the program lands in SRC/build/bin, where serve_bench
#         looks for it.
# Only that target is built, with llama.cpp's own CMake, Release, statically
# linked (one file to copy to the GPU machine: SRC/build/bin plus the
# converter, convert_hf_to_gguf.py, gguf-py/ and conversion/), for sm_90 only
# without PTX (90-real: a third of the size). libcurl (model downloads) is off:
# the device machines reach no network, and an older llama.cpp refuses to
# configure without libcurl's headers otherwise. The source can also come from
# PyPI: llama-cpp-python's sdist carries llama.cpp under vendor/llama.cpp.
set -euo pipefail
src=${1:?usage: bench/llamacpp_build.sh LLAMA_CPP_SOURCE_DIR [JOBS]}
jobs=${2:-$(nproc)}
if [[ ! -f $src/CMakeLists.txt || ! -f $src/convert_hf_to_gguf.py ]]; then
  echo "llamacpp_build: $src is not a llama.cpp source folder (no CMakeLists.txt and" \
       "convert_hf_to_gguf.py)" >&2
  exit 2
fi
if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "llamacpp_build: no nvcc on PATH or in /usr/local/cuda/bin: install the CUDA toolkit" >&2
  exit 1
fi
export PATH=$PATH:/usr/local/cuda/bin
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$src" -B "$src/build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release \
  -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90-real \
  -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=OFF \
  -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF
cmake --build "$src/build" --config Release -j "$jobs" --target llama-batched-bench
ls -l "$src/build/bin/llama-batched-bench"
