#!/usr/bin/env bash
# The embedded default corpus: the English fortune(6) files of Debian's
# `fortunes` and `fortunes-min` packages (about 2.6 MB of quotations,
# jokes, poems and definitions; licence in docs/formats.md), made into a
# byte-level BPE tokenizer and a token dataset for training from scratch.
#
# usage: scripts/corpus.sh [OUT]        (default OUT: build/data/fortunes)
# writes OUT/tokenizer.json and the dataset folder OUT/dataset; running it
# again gives the same bytes. Settings from the environment:
#   TRAINYARD  the trainyard binary (default build/bin/trainyard)
#   VOCAB      tokenizer vocabulary size (default 4096)
#   SEQ_LEN    tokens per training sequence (default 256)
#   VAL        share of documents for validation (default 0.05)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build/data/fortunes}
trainyard=${TRAINYARD:-$root/build/bin/trainyard}
vocab=${VOCAB:-4096}
seq_len=${SEQ_LEN:-256}
val=${VAL:-0.05}
fortunes=/usr/share/games/fortunes

# One file from each package tells whether both are installed.
if [ ! -f "$fortunes/literature" ] || [ ! -f "$fortunes/science" ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "corpus: need root or sudo to install fortunes" >&2; exit 1; }
    sudo="sudo"
  fi
  echo "corpus: installing the Debian packages fortunes and fortunes-min"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends fortunes fortunes-min
fi
if [ ! -x "$trainyard" ]; then
  echo "corpus: $trainyard is not built; run 'cmake --preset default && cmake --build --preset default'" >&2
  exit 1
fi

mkdir -p "$out"
# The folder's regular files (its *.u8 links and *.dat indexes are skipped).
"$trainyard" data train-tokenizer --input "$fortunes" --format fortune \
  --vocab-size "$vocab" --out "$out/tokenizer.json" --force
"$trainyard" data prepare --tokenizer "$out/tokenizer.json" --input "$fortunes" \
  --format fortune --seq-len "$seq_len" --val-fraction "$val" --out "$out/dataset" --force
