#!/usr/bin/env bash
# Issue 13's device runs (acceptance 2): a model preset trained with the
# memory levers on one device, the pre-flight memory plan beside the peak the
# backend measured, and tokens/s.
#
#   bench/memory_bench.sh PRESET T [LEVER...] [-- TRAIN_OPTION...]
#   bench/memory_bench.sh llama-7b 2048 --recompute layer --loss-chunk 1024 \
#       --optimizer adafactor --fused-optimizer --dtype bf16
#   (options after `--` go to `trainyard train` only: --lr 1e-2, ...)
#   bench/memory_bench.sh llama-1b 131072 --recompute layer --loss-chunk 4096 \
#       --optimizer adafactor --fused-optimizer --dtype bf16
#
# Environment: BACKEND (cuda:0), MEMORY_LIMIT (24GiB; "" for the device's
# memory), STEPS (20), BATCH (1), BUILD (build), WORK (a temporary folder),
# TEXT and TOKENIZER (a text file and its tokenizer.json: train on real text,
# whose loss must fall; without them the data are synthetic id sequences
# with a learnable pattern of the preset's vocabulary), DATA (a dataset
# folder already prepared for this sequence length: used as it is), VOCAB (the
# vocabulary without TOKENIZER: 32000 for llama-7b, 128256 for llama-1b,
# else 50257), PLAN_ONLY=1 (print the plan and stop: no device needed).
#
# The plan comes first (`trainyard compile --plan-only`, a second on the
# host, exit 1 when it does not fit MEMORY_LIMIT); then `trainyard train`
# refuses the run itself if it does not fit, or trains STEPS steps. The
# last lines are the summary's: the plan's peak, the measured peak (and how
# the backend measures it), tokens/s and the loss at the first and last
# step.
set -euo pipefail

if [ $# -lt 2 ]; then
  sed -n '2,25p' "$0" >&2
  exit 2
fi
preset=$1
seq=$2
shift 2
# LEVER... (compile and train) and, after `--`, options for train alone.
levers=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  levers+=("$1")
  shift
done
[ $# -gt 0 ] && shift
train_only=("$@")
set -- "${levers[@]}"
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-$here/../build}
ty=$build/bin/trainyard
backend=${BACKEND:-cuda:0}
limit=${MEMORY_LIMIT-24GiB}
steps=${STEPS:-20}
batch=${BATCH:-1}
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
case $preset in
  llama-7b) vocab=${VOCAB:-32000} ;;
  llama-1b) vocab=${VOCAB:-128256} ;;
  *) vocab=${VOCAB:-50257} ;;
esac
limit_args=()
[ -n "$limit" ] && limit_args=(--memory-limit "$limit")

echo "== memory plan: $preset, $batch x $seq tokens, $backend, levers: ${*:-none}"
"$ty" compile --plan-only --backend "$backend" --preset "$preset" --vocab-size "$vocab" \
  --seq-len "$seq" --batch-size "$batch" "${limit_args[@]}" "$@"
[ "${PLAN_ONLY:-0}" = 1 ] && exit 0

data=${DATA:-$work/data-$seq}
if [ ! -d "$data" ]; then
  if [ -n "${TEXT:-}" ]; then
    "$ty" data prepare --tokenizer "$TOKENIZER" --input "$TEXT" --format text \
      --seq-len "$seq" --out "$data"
  else
    # Enough rows for STEPS steps: arithmetic progressions of ids, learnable.
    python3 - "$work/ids.jsonl" "$vocab" "$seq" "$((steps * batch + 1))" <<'PY'
import json, random, sys
path, vocab, seq, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(1)
with open(path, "w") as f:
    left = rows * seq
    while left > 0:
        n = min(left, rng.randrange(512, 8192))
        start, step = rng.randrange(vocab - 1), rng.choice([1, 2, 3, 5])
        f.write(json.dumps([(start + i * step) % (vocab - 1) for i in range(n)]) + "\n")
        left -= n + 1
PY
    "$ty" data prepare --format ids --vocab-size "$vocab" --eos-id "$((vocab - 1))" \
      --input "$work/ids.jsonl" --seq-len "$seq" --out "$data"
  fi
fi

out=$work/run-$preset-$seq
rm -rf "$out"
echo "== training: $steps steps"
"$ty" train --preset "$preset" --data "$data" --backend "$backend" --batch-size "$batch" \
  --max-steps "$steps" --log-every 1 --save-every 0 --cache-dir none --out "$out" \
  "${limit_args[@]}" "$@" "${train_only[@]}"
echo "== $out/summary.txt"
grep -E "^  peak|measured peak|throughput|final train loss|backend's plan" "$out/summary.txt"
python3 - "$out/metrics.jsonl" <<'PY'
import json, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
print("loss: step 1 %.4f, step %d %.4f (%s)" % (losses[0], len(losses), losses[-1],
      "falls" if losses[-1] < losses[0] else "does NOT fall"))
PY
