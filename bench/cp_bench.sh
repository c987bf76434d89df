#!/usr/bin/env bash
# Issue 31's multi-GPU row: a long-sequence Llama step split over N GPUs by
# context parallel, Trainyard against PyTorch's own context parallel
# (bench/pytorch_cp_train.py: FSDP2 over dp x cp, context_parallel's ring
# SDPA, layer checkpointing, chunked loss), in one call on one machine.
#
#   bench/cp_bench.sh BUILD_DIR OUT_DIR
#
# Environment: MODEL (llama-8b; llama-1b, tiny), SEQ (131072), CP (4; the
# world is CP ranks, one replica), STEPS (4 timed), WARMUP (2), LOSS_CHUNK
# (4096), MLP_CHUNK (8192), PEER (1: run the PyTorch peer too), TY_EXTRA
# (more options for every trainyard run), BACKEND (cuda; cpu with MODEL=tiny
# SEQ=64 PEER=0 checks the script where there is no GPU).
#
# Rows, each with tokens/s and peak memory (Trainyard: rank 0's measured
# peak from summary.txt; PyTorch: the largest rank's max_memory_allocated):
#   trainyard AdamW, moments offloaded (--offload optimizer: AdamW's
#     moments do not fit an 80 GB card beside the rest at 8B x 128K)
#   trainyard Adafactor (everything on the card)
#   pytorch AdamW (FSDP2 shards parameters, gradients and moments)
# Both sides: bf16-mixed, every layer recomputed, the loss LOSS_CHUNK tokens
# at a time, clip 1.0, random token ids. Trainyard: --zero 2 over the cp
# ranks (optimizer state and gradient accumulators sharded; weights whole).
set -uo pipefail
build=${1:?usage: cp_bench.sh BUILD_DIR OUT_DIR}
out=${2:?usage: cp_bench.sh BUILD_DIR OUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
model=${MODEL:-llama-8b} seq=${SEQ:-131072} cp=${CP:-4}
steps=${STEPS:-4} warmup=${WARMUP:-2}
ty=$build/bin/trainyard
# shellcheck source=tests/cuda/dist_lib.sh
source "$here/tests/cuda/dist_lib.sh"
dist_env "$build"
mpi+=(-np "$cp")
mkdir -p "$out"
backend=${BACKEND:-cuda}
if [ "$backend" = cuda ]; then
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  if [ "$gpus" -lt "$cp" ]; then
    echo "cp_bench: $gpus GPU(s), CP=$cp needs $cp" >&2
    exit 77
  fi
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
fi

# One row of SEQ+1 random ids per step (the vocabulary of Llama 3).
vocab=128256
[ "$model" = tiny ] && vocab=96 # the fixture Llama's
rows=$((steps + warmup))
python3 - "$out/ids.jsonl" "$seq" "$rows" "$vocab" <<'PY'
import json, random, sys
path, seq, rows, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(31)
with open(path, "w") as f:
    f.write(json.dumps({"ids": [r.randrange(vocab - 2) for _ in range(rows * (seq + 1))]}) + "\n")
PY
"$ty" data prepare --format ids --vocab-size "$vocab" --eos-id $((vocab - 1)) \
  --input "$out/ids.jsonl" --seq-len "$seq" --out "$out/data" --force >/dev/null || exit 1
case $model in
  tiny) src=(--model "$here/tests/fixtures/models/llama") ;;
  *) src=(--preset "$model") ;;
esac
common=(train "${src[@]}" --data "$out/data" --batch-size 1 --max-steps "$rows" --cp "$cp"
        --zero 2 --recompute layer --loss-chunk "${LOSS_CHUNK:-4096}"
        --mlp-chunk "${MLP_CHUNK:-8192}" --dtype bf16-mixed --lr 6e-4 --clip 1.0
        --log-every 1 --save-every 0 --cache-dir none --backend "$backend")
row() { # NAME OPTIONS...
  local name=$1
  shift
  rm -rf "$out/$name"
  # shellcheck disable=SC2086 # TY_EXTRA is words
  timeout -k 10 "${RUN_TIMEOUT:-1500}" "${mpi[@]}" "$ty" "${common[@]}" "$@" ${TY_EXTRA:-} \
    --out "$out/$name" >"$out/$name.log" 2>&1 ||
    { echo "$name: failed"; tail -8 "$out/$name.log"; return; }
  python3 - "$out/$name" "$warmup" "$name" <<'PY'
import json, os, statistics, sys
folder, warm, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = [json.loads(l) for l in open(os.path.join(folder, "metrics.jsonl"))]
tok = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r.get("step", 0) > warm]
peak = ""
for line in open(os.path.join(folder, "summary.txt")):
    if "measured peak" in line:
        peak = line.strip()
print(f"RESULT trainyard-{name} tok_s={statistics.median(tok):.1f} steps={len(tok)} {peak}")
PY
  grep -E "^  peak|per rank" "$out/$name.log" | head -2
}
if [ "$backend" = cuda ]; then # cpu refuses --offload (no memory of its own)
  row adamw-offload --optimizer adamw --offload optimizer
fi
row adafactor --optimizer adafactor
if [ "${PEER:-1}" = 1 ]; then
  timeout -k 10 "${RUN_TIMEOUT:-1500}" torchrun --nproc_per_node "$cp" \
    "$here/bench/pytorch_cp_train.py" --model "$model" --seq "$seq" --cp "$cp" \
    --steps "$steps" --warmup "$warmup" --loss-chunk "${LOSS_CHUNK:-4096}" \
    >"$out/pytorch.log" 2>"$out/pytorch.err" ||
    { echo "pytorch: failed"; tail -8 "$out/pytorch.err"; }
  grep -E "^device|^model|^ms/step|^tokens|^RESULT" "$out/pytorch.log"
fi
