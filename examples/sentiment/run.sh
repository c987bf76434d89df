#!/bin/sh
# The use case of SambaNova's GPT-2 tutorial (fine-tune on SST-2-style
# prompt -> label completions, then require a minimum accuracy on held-out
# prompts), end to end with a tiny GPT-2 and data made here (make_data.py:
# word lists of this repository, nothing downloaded). About 2 s on an idle
# 2-core machine.
#
#   examples/sentiment/run.sh [TRAINYARD] [WORKDIR]
#
# 1. make the reviews; 2. a byte-level BPE tokenizer; 3. pre-train a
# gpt2-tiny on the unlabelled reviews; 4. fine-tune it on labelled lines,
# scoring the held-out set as multiple choice (positive / negative) at
# every evaluation and requiring --min-eval-acc at the end; 5. `trainyard
# eval` of the fine-tuned checkpoint, with the JSON report.
set -eu
TY=${1:-trainyard}
WORK=${2:-sentiment-run}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK"
cd "$WORK"
rm -rf data tok.json pre-data ft-data pretrain finetune report.json
python3 "$HERE/make_data.py" data
cat data/reviews.txt data/train.txt > data/corpus.txt
"$TY" data train-tokenizer --input data/corpus.txt --vocab-size 400 --out tok.json
"$TY" data prepare --tokenizer tok.json --format lines --input data/reviews.txt \
  --seq-len 32 --out pre-data
"$TY" data prepare --tokenizer tok.json --format lines --input data/train.txt \
  --seq-len 32 --out ft-data
"$TY" train --preset gpt2-tiny --data pre-data --tokenizer tok.json --out pretrain \
  --max-steps 30 --batch-size 16 --lr 3e-3 --warmup-steps 5 --cache-dir none
"$TY" train --model pretrain/checkpoint-30 --data ft-data --out finetune \
  --max-steps 120 --batch-size 16 --lr 3e-3 --warmup-steps 10 --cache-dir none \
  --eval-data data/eval.jsonl --eval-choices --eval-every 40 --min-eval-acc 0.75
"$TY" eval --model finetune/checkpoint-120 --data data/eval.jsonl --choices --out report.json
