#!/usr/bin/env bash
# The cost of `train --deterministic` (issue 34: at most 20% on a GPU):
# `trainyard train` of a preset at random init on random token ids, without
# and with --deterministic (the rows' tree on the device, train_tree_dev.c),
# and with HOST=1 also the host tree it replaced (TRAINYARD_DEBUG_DET_HOST_TREE),
# per dtype; the median tokens/s of metrics.jsonl after the warm-up steps,
# and each deterministic row's ratio to the plain one.
#
#   bench/deterministic_train_bench.sh BUILD_DIR [OUT_DIR]
#
# Environment: BACKEND (cuda:0 when nvidia-smi sees a card, else cpu),
# CONFIGS (preset:batch:seq; default on cuda "gpt2-124m:16:1024
# gpt2-124m:8:1024", on cpu "gpt2-tiny:8:64"), DTYPES ("bf16-mixed f32" on
# cuda, "f32" on cpu), STEPS (12 in all), WARMUP (2 steps left out of the
# median), HOST (1 on cpu, 0 on cuda: the host tree's row too; on a GPU it
# moves every row's gradients over PCIe twice and is slow), VOCAB (50257).
set -uo pipefail
build=${1:?usage: deterministic_train_bench.sh BUILD_DIR [OUT_DIR]}
out=${2:-${OUT:-/tmp/ty-det-train-bench}}
ty=$build/bin/trainyard
[[ -x $ty ]] || { echo "deterministic_train_bench.sh: $ty not found; build first" >&2; exit 2; }
mkdir -p "$out"
export TRAINYARD_BACKEND_PATH=${TRAINYARD_BACKEND_PATH:-$build/lib/trainyard/backends}
# Libraries a GPU machine lacks, carried by scripts/build-device.sh
if ldd "$ty" 2>/dev/null | grep -q "not found"; then
  export LD_LIBRARY_PATH=$build/lib/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
if [[ -z ${BACKEND:-} ]]; then
  if nvidia-smi -L >/dev/null 2>&1; then BACKEND=cuda:0; else BACKEND=cpu; fi
fi
if [[ $BACKEND == cuda* ]]; then
  configs=${CONFIGS:-"gpt2-124m:16:1024 gpt2-124m:8:1024"}
  dtypes=${DTYPES:-"bf16-mixed f32"}
  host=${HOST:-0}
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/card: /'
else
  configs=${CONFIGS:-"gpt2-tiny:8:64"}
  dtypes=${DTYPES:-"f32"}
  host=${HOST:-1}
fi
steps=${STEPS:-12}
warmup=${WARMUP:-2}
vocab=${VOCAB:-50257}
echo "backend $BACKEND; $steps steps, the first $warmup left out; date $(date -u +%FT%TZ)"

# Random ids, enough for `steps` steps of the largest batch x seq, once per seq.
data() {
  local seq=$1 rows=$2 dir="$out/data-$1"
  [[ -d $dir ]] && { echo "$dir"; return; }
  python3 - "$dir.jsonl" "$vocab" "$seq" "$rows" <<'EOF'
import json, random, sys
path, vocab, seq, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(1)
with open(path, "w") as f:
    for _ in range(rows):
        f.write(json.dumps([rng.randrange(vocab - 1) for _ in range(seq + 1)]) + "\n")
EOF
  "$ty" data prepare --format ids --vocab-size "$vocab" --eos-id $((vocab - 1)) \
    --input "$dir.jsonl" --seq-len "$seq" --out "$dir" >"$dir.log" 2>&1 ||
    { echo "data prepare failed: $(tail -3 "$dir.log")" >&2; return 1; }
  echo "$dir"
}

# Median tokens/s of a run's steps after the warm-up.
median() {
  python3 - "$1/metrics.jsonl" "$warmup" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tok = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and "loss" in r]
tok = tok[int(sys.argv[2]):] or tok
print("%.1f" % statistics.median(tok) if tok else "?")
EOF
}

# run NAME PRESET B T DTYPE DATA [ENV=VALUE...] -- [train options...]
run() {
  local name=$1 preset=$2 b=$3 t=$4 dtype=$5 dir=$6 run_out="$out/$1"
  shift 6
  local env=()
  while [[ $# -gt 0 && $1 != -- ]]; do env+=("$1"); shift; done
  shift
  rm -rf "$run_out"
  env "${env[@]}" "$ty" train --preset "$preset" --data "$dir" --out "$run_out" \
    --backend "$BACKEND" --dtype "$dtype" --batch-size "$b" --seq-len "$t" --max-steps "$steps" \
    --log-every 1 --cache-dir "$out/cache" "$@" >"$run_out.log" 2>&1 ||
    { echo "$name failed: $(tail -3 "$run_out.log")" >&2; echo "?"; return; }
  median "$run_out"
}

printf '%-12s %4s %5s %-11s %-20s %12s %8s\n' preset B T dtype run "tokens/s" "vs plain"
for cfg in $configs; do
  IFS=: read -r preset b t <<<"$cfg"
  dir=$(data "$t" $((b * (steps + 2)))) || continue
  for dtype in $dtypes; do
    tag="$preset-$b-$t-$dtype"
    plain=$(run "$tag-plain" "$preset" "$b" "$t" "$dtype" "$dir" --)
    printf '%-12s %4s %5s %-11s %-20s %12s %8s\n' "$preset" "$b" "$t" "$dtype" plain "$plain" 1.00
    kinds="device"
    [[ $host == 1 ]] && kinds="device host"
    for kind in $kinds; do
      envs=()
      [[ $kind == host ]] && envs=(TRAINYARD_DEBUG_DET_HOST_TREE=1)
      det=$(run "$tag-det-$kind" "$preset" "$b" "$t" "$dtype" "$dir" "${envs[@]}" -- \
        --deterministic)
      ratio=$(awk -v a="$det" -v p="$plain" 'BEGIN { if (a + 0 > 0 && p + 0 > 0)
        printf "%.2f", a / p; else print "?" }')
      printf '%-12s %4s %5s %-11s %-20s %12s %8s\n' "$preset" "$b" "$t" "$dtype" \
        "deterministic/$kind" "$det" "$ratio"
    done
  done
done
