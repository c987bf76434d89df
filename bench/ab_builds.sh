#!/usr/bin/env bash
# Two builds of Trainyard on one benchmark row, on the same card in the same
# call: "is the new build as fast as the old one". Rounds alternate the
# builds (A B A B ...) so a clock or thermal drift lands on both; the
# medians and their ratio come last.
#
#   bench/ab_builds.sh OLD_BUILD NEW_BUILD [MODEL:BATCH:SEQ] [ROUNDS]
#
# Defaults: gpt2-124m:16:1024 (bf16-mixed, AdamW, as bench/cuda_bench.sh),
# 5 rounds of STEPS (default 30) timed steps after 5 warm-up steps. BACKEND
# (default cuda:0) picks the device. Each build's plugins come from its own
# lib/trainyard/backends. Both builds train on the same tokens from the
# same weights, so the first round's loss curves are compared step by step
# too (the largest relative difference and where; STEPS=45 gives the
# 50-step check). OLD_ENV / NEW_ENV (space-separated NAME=VALUE words) set
# the environment of each side's runs, so one build can be timed against
# itself with a switch off: OLD_ENV=TRAINYARD_CUDA_WEIGHT_COPIES=0
# bench/ab_builds.sh build build. Logs and ab.txt under $OUT (default
# /tmp/ty-ab-out).
set -uo pipefail
old=${1:?usage: ab_builds.sh OLD_BUILD NEW_BUILD [MODEL:BATCH:SEQ] [ROUNDS]}
new=${2:?usage: ab_builds.sh OLD_BUILD NEW_BUILD [MODEL:BATCH:SEQ] [ROUNDS]}
row=${3:-gpt2-124m:16:1024}
rounds=${4:-5}
backend=${BACKEND:-cuda:0}
steps=${STEPS:-30}
out=${OUT:-/tmp/ty-ab-out}
mkdir -p "$out"
IFS=: read -r model batch seq <<<"$row"
for b in "$old" "$new"; do
  [[ -x $b/bin/train_bench ]] || { echo "ab_builds: $b/bin/train_bench is missing" >&2; exit 2; }
done

# One run of BUILD; prints its tokens/s (the RESULT line's tok_s field).
run_one() {
  local build=$1 tag=$2 round=$3 log side_env
  log="$out/$tag-$round.log"
  if [[ $tag == old ]]; then side_env=${OLD_ENV:-}; else side_env=${NEW_ENV:-}; fi
  # shellcheck disable=SC2086 # the words are NAME=VALUE assignments
  env $side_env TRAINYARD_BACKEND_PATH="$build/lib/trainyard/backends" timeout 600 \
    "$build/bin/train_bench" --backend "$backend" --model "$model" --dtype bf16-mixed \
    --batch "$batch" --seq "$seq" --steps "$steps" --warmup 5 >"$log" 2>&1
  grep '^RESULT' "$log" | tail -1 | grep -o 'tok_s=[0-9.]*' | cut -d= -f2
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR) print (NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

: >"$out/ab-old.txt"
: >"$out/ab-new.txt"
for ((r = 1; r <= rounds; r++)); do
  a=$(run_one "$old" old "$r")
  b=$(run_one "$new" new "$r")
  echo "round $r: old ${a:-FAILED} new ${b:-FAILED} tok/s"
  [[ -n $a ]] && echo "$a" >>"$out/ab-old.txt"
  [[ -n $b ]] && echo "$b" >>"$out/ab-new.txt"
done
mo=$(median <"$out/ab-old.txt")
mn=$(median <"$out/ab-new.txt")
if [[ -z $mo || -z $mn ]]; then
  echo "ab_builds: a build produced no result (logs in $out)" >&2
  exit 1
fi
# The loss curves of round 1 (train_bench's "step N: ... loss L" lines),
# compared by tests/cuda/dist_lib.sh's worst_gap.
# shellcheck source=tests/cuda/dist_lib.sh
source "$(dirname "$0")/../tests/cuda/dist_lib.sh"
curve() { sed -n 's/^step *\([0-9]*\).* loss \([-0-9.naif]*\) .*/\1 \2/p' "$1"; }
if [[ -f $out/old-1.log && -f $out/new-1.log ]]; then
  curve "$out/old-1.log" >"$out/curve-old.txt"
  curve "$out/new-1.log" >"$out/curve-new.txt"
  read -r n worst at < <(worst_gap "$out/curve-old.txt" "$out/curve-new.txt")
  if [[ $n -gt 0 ]]; then
    read -r last lo < <(tail -n 1 "$out/curve-old.txt")
    read -r _ ln < <(tail -n 1 "$out/curve-new.txt")
    where="at step $at"
    [[ $at == 0 ]] && where="(equal at every step)"
    echo "loss curves, round 1: $n steps, largest relative difference $worst $where; step $last: old $lo new $ln"
  else
    echo "loss curves, round 1: no step lines"
  fi | tee "$out/loss-curves.txt"
fi
ratio=$(awk -v a="$mo" -v b="$mn" 'BEGIN {printf "%.4f", b / a}')
echo "row $model B=$batch T=$seq bf16-mixed on $backend: old${OLD_ENV:+ ($OLD_ENV)} median $mo, new${NEW_ENV:+ ($NEW_ENV)} median $mn tok/s, new/old $ratio" |
  tee "$out/ab.txt"
