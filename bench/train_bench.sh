#!/usr/bin/env bash
# GPT-2 124M training step, Trainyard's cpu plugin against PyTorch on the CPU,
# in the same run: (B=4, T=64) and (B=8, T=256), f32, same thread count, and
# one table at the end (docs/performance.md records it).
#
#   bench/train_bench.sh [build-dir]
#
# Environment: THREADS (2), STEPS (10 timed), WARMUP (2), ROUNDS (1: each
# round runs every program once per shape, so ROUNDS=3 shows the spread),
# PYTHON (a python with torch; default /tmp/torchenv/bin/python, else
# python3), FUSED=1 adds a row for PyTorch with AdamW(fused=True),
# COMPILE=1 a torch.compile row (with fused AdamW; inductor needs a C++
# compiler, and the first step compiles for a minute), SHAPES ("4x64 8x256"),
# IDLE_MIN (90: before each program, wait up to IDLE_WAIT=600 s for the CPUs
# to be at least this % idle over 3 s), RETRIES (2: runs again when fewer
# than half of the timed steps were undisturbed), LOG (a file for the
# programs' full output).
#
# The machine may be shared: both programs measure, per step, how much of
# the CPUs other processes used, and a step where that exceeds 5% counts as
# disturbed. The table gives the median over undisturbed steps (all steps,
# marked *, when fewer than half were undisturbed).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
bench=$build/bin/train_bench
threads=${THREADS:-2}
steps=${STEPS:-10}
warmup=${WARMUP:-2}
rounds=${ROUNDS:-1}
shapes=${SHAPES:-"4x64 8x256"}
idle_min=${IDLE_MIN:-90}
idle_wait=${IDLE_WAIT:-600}
if [[ -z ${PYTHON:-} ]]; then
  if [[ -x /tmp/torchenv/bin/python ]]; then PYTHON=/tmp/torchenv/bin/python; else PYTHON=python3; fi
fi
[[ -x $bench ]] || { echo "train_bench.sh: $bench not found; build first" >&2; exit 2; }
"$PYTHON" -c 'import torch' 2>/dev/null ||
  { echo "train_bench.sh: $PYTHON has no torch (pip install torch)" >&2; exit 2; }

# CPU idle % over $1 seconds, from /proc/stat.
idle_pct() {
  local a b c d e f g h t1 i1 t2 i2
  read -r _ a b c d e f g h _ </proc/stat
  t1=$((a + b + c + d + e + f + g + h)); i1=$((d + e))
  sleep "$1"
  read -r _ a b c d e f g h _ </proc/stat
  t2=$((a + b + c + d + e + f + g + h)); i2=$((d + e))
  echo $((100 * (i2 - i1) / (t2 - t1)))
}

# Waits for an idle machine; prints the last idle % seen.
wait_idle() {
  local start=$SECONDS idle
  while :; do
    idle=$(idle_pct 3)
    if ((idle >= idle_min || SECONDS - start >= idle_wait)); then echo "$idle"; return; fi
  done
}

results=$(mktemp)
trap 'rm -f "$results"' EXIT
log=${LOG:-/dev/null}

run_one() { # name shape round command...
  local name=$1 shape=$2 round=$3 idle line clean try
  shift 3
  for ((try = 0; try <= ${RETRIES:-2}; ++try)); do
    idle=$(wait_idle)
    echo "== $name $shape round $round (idle ${idle}% before): $*" >&2
    line=$("$@" 2>>"$log" | tee -a "$log" | grep '^RESULT' || true)
    if [[ -z $line ]]; then
      echo "train_bench.sh: $name $shape failed (LOG=file keeps its output)" >&2
      line="RESULT $name failed"
      break
    fi
    echo "   $line" >&2
    clean=$(sed -n 's/.*clean_steps=\([0-9]*\).*/\1/p' <<<"$line")
    ((2 * ${clean:-0} >= steps)) && break
  done
  echo "$name $shape $round $idle $line" >>"$results"
}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs; $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "threads $threads, $warmup warm-up + $steps timed steps; torch $("$PYTHON" -c 'import warnings; warnings.simplefilter("ignore"); import torch; print(torch.__version__)' 2>/dev/null)"
for ((r = 1; r <= rounds; ++r)); do
  for shape in $shapes; do
    B=${shape%x*} T=${shape#*x}
    run_one trainyard "$shape" "$r" "$bench" --batch "$B" --seq "$T" --steps "$steps" \
      --warmup "$warmup" --threads "$threads"
    run_one pytorch "$shape" "$r" "$PYTHON" "$here/pytorch_train_step.py" --batch "$B" \
      --seq "$T" --steps "$steps" --warmup "$warmup" --threads "$threads"
    if [[ ${FUSED:-0} == 1 ]]; then
      run_one pytorch-fused "$shape" "$r" "$PYTHON" "$here/pytorch_train_step.py" \
        --batch "$B" --seq "$T" --steps "$steps" --warmup "$warmup" --threads "$threads" --fused
    fi
    if [[ ${COMPILE:-0} == 1 ]]; then
      run_one pytorch-compile-fused "$shape" "$r" "$PYTHON" "$here/pytorch_train_step.py" \
        --batch "$B" --seq "$T" --steps "$steps" --warmup $((warmup + 2)) \
        --threads "$threads" --compile --fused
    fi
  done
done

# One table: per shape and program, the median over rounds of each run's
# undisturbed median ms/step (min-max over rounds beside it), tok/s from
# that, and Trainyard's throughput over each PyTorch's.
python3 - "$results" "$shapes" "$steps" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
shapes, steps = sys.argv[2].split(), int(sys.argv[3])
def val(f, key):
    for x in f:
        if x.startswith(key + "="):
            return float(x.split("=")[1])
    return None
data = {}
for r in rows:
    name, shape = r[0], r[1]
    ms, clean = val(r[4:], "clean_median_ms"), val(r[4:], "clean_steps")
    if ms is None or not clean or 2 * clean < steps:
        ms, mark = val(r[4:], "median_ms"), "*"
    else:
        mark = ""
    if ms is not None:
        data.setdefault((shape, name), []).append((ms, f"{int(clean or 0)}/{steps}{mark}"))
print("| B x T | program | ms/step | range over rounds | tok/s | Trainyard speed-up | undisturbed steps |")
print("|---|---|---:|---:|---:|---:|---|")
for shape in shapes:
    B, T = map(int, shape.split("x"))
    ours = data.get((shape, "trainyard"))
    ours_ms = statistics.median(m for m, _ in ours) if ours else None
    for name in ("trainyard", "pytorch", "pytorch-fused", "pytorch-compile-fused"):
        runs = data.get((shape, name))
        if not runs:
            continue
        ms = [m for m, _ in runs]
        med = statistics.median(ms)
        ratio = f"{med / ours_ms:.2f}x" if ours_ms and name != "trainyard" else "-"
        print(f"| {B} x {T} | {name} | {med:.1f} | {min(ms):.1f}-{max(ms):.1f} | "
              f"{B * T * 1000 / med:.0f} | {ratio} | {' '.join(c for _, c in runs)} |")
EOF
