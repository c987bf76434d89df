#!/usr/bin/env bash
# README command 2 (and CI): install what is missing, build, and test: a
# gcc build with -Werror running every test but the end-to-end ones (its
# test preset leaves out label e2e), then a clang build with
# AddressSanitizer + UndefinedBehaviorSanitizer (also -Werror) running
# every test. The end-to-end tests ran in both until CI passed 30 minutes
# (2026-12-07: 31 min, 702 s of gcc test time in e2e).
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
