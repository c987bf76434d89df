#!/usr/bin/env bash
# Builds the tree that tests/cuda/device_run.sh runs on a GPU machine: the
# cuda plugin (fatbins for TY_CUDA_ARCHS), the opencl plugin, and the cpu
# plugin WITHOUT oneDNN (the GPU machines have no libdnnl), in build-device/.
# Carry build-device/bin, build-device/lib and build-device/tests/cuda-fatbin-sm80.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DTY_WITH_CUDA=ON \
  -DTY_WITH_ONEDNN=OFF -DTY_WITH_OPENCL=ON "$@" >/dev/null
cmake --build build-device -j "$(nproc)" --target trainyard train_bench ty_backend_cpu \
  ty_backend_cuda ty_backend_opencl ty_backend_dataflow ty_backend_template ty_cuda_test_fatbin \
  engine_bench ty_mpi mpi_bench
# The GPU machines have no libmicrohttpd (`trainyard serve`): carry Debian's
# copy; tests/cuda/device_run.sh uses it only when the system has none.
mkdir -p build-device/lib/deps
cp -L /usr/lib/x86_64-linux-gnu/libmicrohttpd.so.12 build-device/lib/deps/
du -sh build-device/bin build-device/lib build-device/tests/cuda-fatbin-sm80
