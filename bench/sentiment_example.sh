#!/usr/bin/env bash
# The sentiment example's wall time (examples/sentiment/run.sh: tokenizer,
# fine-tune, eval --choices), a speed target kept out of the test suite
# (apps_trainyard_eval_ExampleTest checks its accuracy, not its time).
# Target: under a minute on an idle 2-core machine. Exit 1 past it.
# usage: bench/sentiment_example.sh [BUILD_DIR]   (default build-ci-gcc)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build-ci-gcc}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s.%N)
sh examples/sentiment/run.sh "$build/bin/trainyard" "$work/run" > "$work/log" 2>&1 || {
  tail -20 "$work/log"; exit 2; }
end=$(date +%s.%N)
secs=$(echo "$end - $start" | bc)
acc=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["metrics"]; print(m["accuracy"])' "$work/run/report.json")
echo "examples/sentiment: ${secs} s, accuracy ${acc} (target: under 60 s)"
awk -v s="$secs" 'BEGIN { exit !(s < 60) }'
