#!/usr/bin/env bash
# Builds the tree that tests/cuda/device_run.sh runs on a GPU machine: the
# cuda plugin (fatbins for TY_CUDA_ARCHS), the opencl plugin, and the cpu
# plugin WITHOUT oneDNN (the GPU machines have no libdnnl), in build-device/.
# Carry build-device/bin, build-device/lib, build-device/tests/cuda-fatbin-sm80
# and build-device/tests/cuda-fatbin-test (the test-only kernels FaultTest launches)
# (and build-device/tests/cuda_emu_deterministic_test for device_run.sh's
# deterministic phase, build-device/tests/cpu_gemm_stream_test for crossdev).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DTY_WITH_CUDA=ON \
  -DTY_WITH_ONEDNN=OFF -DTY_WITH_OPENCL=ON "$@" >/dev/null
cmake --build build-device -j "$(nproc)" --target trainyard train_bench ty_backend_cpu \
  ty_backend_cuda ty_backend_opencl ty_backend_dataflow ty_backend_template ty_cuda_test_fatbin \
  engine_bench ty_mpi mpi_bench cuda_emu_deterministic_test cpu_gemm_stream_test
# The GPU machines have no libmicrohttpd (`trainyard serve`): carry Debian's
# copy; tests/cuda/device_run.sh uses it only when the system has none.
mkdir -p build-device/lib/deps
cp -L /usr/lib/x86_64-linux-gnu/libmicrohttpd.so.12 build-device/lib/deps/
# ...and no cmocka (the test binaries device_run.sh runs)
cp -L /usr/lib/x86_64-linux-gnu/libcmocka.so.0 build-device/lib/deps/
# ...and no iproute2 (the namespace hosts of tests/multihost, device_run.sh
# multihost): Debian's ip with the libraries it links, run by a wrapper.
mkdir -p build-device/lib/deps/iproute2
cp -L /usr/sbin/ip build-device/lib/deps/iproute2/ip.real
for l in libbpf.so.1 libelf.so.1 libmnl.so.0 libbsd.so.0 libcap.so.2 libmd.so.0; do
  cp -L "/lib/x86_64-linux-gnu/$l" build-device/lib/deps/iproute2/
done
printf '%s\n' '#!/bin/sh' '# Debian'"'"'s ip for GPU machines without iproute2 (scripts/build-device.sh)' \
  'here=$(dirname "$(readlink -f "$0")")' 'LD_LIBRARY_PATH=$here${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec "$here/ip.real" "$@"' \
  > build-device/lib/deps/iproute2/ip
chmod +x build-device/lib/deps/iproute2/ip
du -sh build-device/bin build-device/lib build-device/tests/cuda-fatbin-sm80 \
  build-device/tests/cuda-fatbin-test
