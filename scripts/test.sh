#!/usr/bin/env bash
# README command 2 (and CI): install what is missing, build, and run every
# test twice: a gcc build with -Werror, then a clang build with
# AddressSanitizer + UndefinedBehaviorSanitizer (also -Werror).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=$(nproc)

echo "== gcc, -Werror =="
cmake --preset ci-gcc
cmake --build --preset ci-gcc -j "$jobs"
ctest --preset ci-gcc -j "$jobs"

echo "== clang, -Werror, ASan + UBSan =="
cmake --preset ci-asan
cmake --build --preset ci-asan -j "$jobs"
ctest --preset ci-asan -j "$jobs"
