#!/usr/bin/env bash
# README command 1: install what is missing, build, and run the main job on
# the embedded default. Extra arguments are passed to the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default
# The main job. Until training lands (issue "Training end to end") it is the
# device listing: every backend plugin found, its devices, and rejections.
exec ./build/bin/trainyard devices "$@"
