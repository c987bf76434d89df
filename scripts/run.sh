#!/usr/bin/env bash
# README command 1: install what is missing, build, and run the main job on
# the embedded default: a byte-level BPE tokenizer and a token dataset made
# from the fortunes corpus (Debian's fortunes packages), a small GPT-2
# trained from scratch on the cpu backend for two epochs (a few minutes on
# two cores), then a generated sample. Extra arguments go to `trainyard
# train` (e.g. --epochs 1 or --backend 'cpu?threads=2'); running it again
# resumes or, when finished, just prints the sample.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default
data=build/data/fortunes
bash scripts/corpus.sh "$data"
out=build/runs/default
./build/bin/trainyard train --config scripts/default.cfg --data "$data/dataset" \
  --tokenizer "$data/tokenizer.json" --out "$out" "$@"
latest=$(ls -d "$out"/checkpoint-* | sort -t- -k2 -n | tail -n 1)
echo
echo "== a sample from $latest =="
./build/bin/trainyard generate --model "$latest" --prompt "The secret of life is" \
  --max-new-tokens 60 --temperature 0.8 --top-p 0.95 --seed 1
