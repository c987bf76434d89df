#!/usr/bin/env bash
# Issue 18 in one call of the device tool: data-parallel scaling of GPT-2 on
# one host of up to 8 GPUs, next to PyTorch DDP on the same cards.
#
#   tests/cuda/scale_check.sh BUILD_DIR OUT_DIR [N...]     (default N: 2 4 8)
#
# 1. GPT-2 124M (PRESET), bf16-mixed, T=SEQ (1024), ROWS (16) rows per GPU,
#    STEPS (50) steps on 1 GPU and on each N: tokens/s (median after step
#    5) in all and per GPU, scaling efficiency (per GPU / 1 GPU; issue 18's
#    target is 0.93 at 8), the run's peak memory; then the same at the
#    largest N with --zero 1.
# 2. The loss curve: 1 GPU with --grad-accum N_max (the same global batch as
#    the largest N) against the N_max run, every step within bf16's
#    tolerance (1e-2 relative); the two curves in curve.txt.
# 3. GPT-2 350M (PRESET2), ROWS2 (8) rows per GPU, on 1 GPU and the largest N.
# 4. PyTorch on the largest N (PEERS, default "ddp ddp350"): DDP +
#    torch.compile of the same model, batch and sequence
#    (bench/pytorch_dist_train.py under torchrun), and the ratio.
# One table at the end (results.txt). Every launch is bounded (RUN_TIMEOUT,
# 240 s; a hang fails its row, not the call).
#
# Environment: STEPS, SEQ, ROWS, ROWS2, PRESET, PRESET2, PEERS ("none" for
# none), RUN_TIMEOUT, PYTHON, TORCHRUN, and BACKEND (cuda) for a dry run of
# the script on cpu: BACKEND=cpu PRESET=gpt2-tiny PRESET2=gpt2-tiny SEQ=64
# ROWS=2 ROWS2=2 STEPS=8 PEERS=none tests/cuda/scale_check.sh build out 2
set -uo pipefail
build=${1:?usage: scale_check.sh BUILD_DIR OUT_DIR [N...]}
out=${2:?usage: scale_check.sh BUILD_DIR OUT_DIR [N...]}
shift 2
ngpus=("${@:-2 4 8}")
read -r -a ngpus <<<"${ngpus[*]}"
nmax=${ngpus[${#ngpus[@]}-1]}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=tests/cuda/dist_lib.sh
source "$here/dist_lib.sh"
ty=$build/bin/trainyard
steps=${STEPS:-50}
seq=${SEQ:-1024}
rows=${ROWS:-16}
rows2=${ROWS2:-8}
preset=${PRESET:-gpt2-124m}
preset2=${PRESET2:-gpt2-350m}
backend=${BACKEND:-cuda}
peers=${PEERS:-"ddp ddp350"}
py=${PYTHON:-python3}
torchrun=${TORCHRUN:-torchrun}
export TRAINYARD_BACKEND_PATH=${TRAINYARD_BACKEND_PATH:-$build/lib/trainyard/backends}
export NCCL_NVLS_ENABLE=0
mkdir -p "$out"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE
     -x TRAINYARD_BACKEND_PATH -x LD_LIBRARY_PATH -x PATH)
tmo=(timeout -k 10 "${RUN_TIMEOUT:-240}")
status=0
rows_out=()
one_dev=$backend
[[ $backend == cuda ]] && one_dev=cuda:0

{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
    sort | uniq -c
  "$ty" devices 2>/dev/null | grep -i "nccl" | head -2
  echo "command: $0 $build $out ${ngpus[*]} (STEPS=$steps SEQ=$seq ROWS=$rows PRESET=$preset)"
} | tee "$out/host.txt"

# Runs "$@" with its output in LOG; on failure prints the tail and returns 1.
launch() {
  local log=$1 what=$2
  shift 2
  "${tmo[@]}" "$@" >"$log" 2>&1
  local rc=$?
  if [[ $rc != 0 ]]; then
    echo "FAIL: $what (exit $rc; $log):"
    grep -v "^Epoch" "$log" | tail -6 | sed 's/^/    /'
    status=1
  fi
  return $rc
}

# a run's directory -> its measured peak device memory (rank 0's summary.txt)
peak_of() {
  sed -n 's/^measured peak device memory: \([0-9.]* [KMG]i\{0,1\}B\).*/\1/p' "$1/summary.txt" \
    2>/dev/null | head -1
}

row() { # name gpus tokens/s one-gpu-per-gpu peak
  local eff
  eff=$(awk -v t="$3" -v n="$2" -v o="$4" 'BEGIN {print (o > 0 ? t / n / o : 0)}')
  rows_out+=("$(printf '%-34s %5d %12.0f %12.0f %8.3f  %s' "$1" "$2" "$3" \
    "$(awk -v t="$3" -v n="$2" 'BEGIN {print t / n}')" "$eff" "${5:-?}")")
  echo "${rows_out[-1]}"
}

# ---- data: synthetic ids over GPT-2's vocabulary, enough for every run ----
tokens=$(( (steps + 2) * rows * (seq + 1) * nmax * 5 / 4 ))
synth_ids "$out/ids.jsonl" "$tokens" 50256 16 240 3
"$ty" data prepare --format ids --vocab-size 50257 --eos-id 50256 --input "$out/ids.jsonl" \
  --seq-len "$seq" --out "$out/data" --force >/dev/null || { echo "data prepare failed"; exit 1; }
rm -f "$out/ids.jsonl"
base=(train --data "$out/data" --seq-len "$seq" --dtype bf16-mixed --dropout 0 --max-steps "$steps"
      --log-every 1 --cache-dir "$out/cache" --save-every 0)

# train_row LABEL DIR GPUS REF ARGS...: one training run (1 GPU: this
# process on $one_dev; more: mpirun on $backend) and its row; its median
# tokens/s in $last_tok (0 when it failed). REF: the model's 1-GPU tokens/s
# for the efficiency (empty: this run's own).
train_row() {
  local label=$1 dir=$2 n=$3 ref=$4
  shift 4
  local cmd=("$ty") dev=$one_dev
  if ((n > 1)); then cmd=("${mpi[@]}" -np "$n" "$ty"); dev=$backend; fi
  last_tok=0
  launch "$dir.log" "$label on $n GPU(s)" "${cmd[@]}" "${base[@]}" "$@" --backend "$dev" \
    --out "$dir" || return 1
  last_tok=$(median_tok "$dir/metrics.jsonl" 5)
  row "$label" "$n" "$last_tok" "${ref:-$last_tok}" "$(peak_of "$dir")"
}

# ---- 1. scaling, 124M ----
echo "== 1. $preset, bf16-mixed, T=$seq, $rows rows per GPU, $steps steps, on $backend"
run124=(--preset "$preset" --batch-size "$rows")
train_row "trainyard $preset" "$out/s-1" 1 "" "${run124[@]}"
one=$last_tok
for n in "${ngpus[@]}"; do train_row "trainyard $preset" "$out/s-$n" "$n" "$one" "${run124[@]}"; done
train_row "trainyard $preset --zero 1" "$out/z-$nmax" "$nmax" "$one" "${run124[@]}" --zero 1

# ---- 2. the loss curve: N_max GPUs against 1 GPU with the same global batch ----
echo "== 2. loss curve: $nmax GPUs against 1 GPU x --grad-accum $nmax, $steps steps"
curve=""
if launch "$out/a-1x$nmax.log" "1 GPU x --grad-accum $nmax" "$ty" "${base[@]}" "${run124[@]}" \
     --grad-accum "$nmax" --backend "$one_dev" --out "$out/a-1x$nmax" &&
   [[ -f $out/s-$nmax/metrics.jsonl ]]; then
  losses "$out/a-1x$nmax/metrics.jsonl" >"$out/a.losses"
  losses "$out/s-$nmax/metrics.jsonl" >"$out/b.losses"
  read -r count worst at <<<"$(worst_gap "$out/a.losses" "$out/b.losses")"
  verdict=FAIL
  awk -v c="$count" -v w="$worst" -v s="$steps" 'BEGIN {exit !(c == s && w <= 1e-2)}' &&
    verdict=PASS
  [[ $verdict == PASS ]] || status=1
  curve="loss curve: $nmax GPUs vs 1 GPU x accum $nmax: $count steps, worst relative gap $worst at step $at: $verdict"
  echo "$curve"
  { echo "# step  loss(1 GPU x accum $nmax)  step  loss($nmax GPUs)"
    paste "$out/a.losses" "$out/b.losses"; } >"$out/curve.txt"
fi

# ---- 3. 350M ----
echo "== 3. $preset2, $rows2 rows per GPU"
run350=(--preset "$preset2" --batch-size "$rows2")
train_row "trainyard $preset2" "$out/m-1" 1 "" "${run350[@]}"
one2=$last_tok
train_row "trainyard $preset2" "$out/m-$nmax" "$nmax" "$one2" "${run350[@]}"

# ---- 4. PyTorch DDP + torch.compile on the same cards ----
for peer in $peers; do
  [[ $peer == none ]] && continue
  case $peer in
    ddp) model=$preset b=$rows ref=$one ;;
    ddp350) model=$preset2 b=$rows2 ref=$one2 ;;
    *) echo "unknown peer '$peer' (ddp, ddp350, none)"; status=1; continue ;;
  esac
  log="$out/pt-$peer.log"
  launch "$log" "PyTorch DDP + compile, $model on $nmax GPUs" "$torchrun" --standalone \
    --nproc_per_node "$nmax" "$root/bench/pytorch_dist_train.py" --model "$model" --batch "$b" \
    --seq "$seq" --steps 20 --warmup 5 --ddp --compile || continue
  line=$(grep '^RESULT' "$log" | tail -1)
  tok=$(sed -n 's/.* tok_s=\([0-9.]*\).*/\1/p' <<<"$line")
  peak=$(sed -n 's/.* peak_mib=\([0-9]*\).*/\1/p' <<<"$line")
  row "pytorch DDP+compile $model" "$nmax" "${tok:-0}" "$ref" "${peak:-?} MiB"
done

{
  echo
  echo "== results (efficiency: tokens/s per GPU over trainyard's own 1-GPU run of the model)"
  printf '%-34s %5s %12s %12s %8s  %s\n' run GPUs tokens/s "per GPU" eff. peak
  for r in "${rows_out[@]}"; do echo "$r"; done
  [[ -n $curve ]] && echo "$curve"
  [[ $status == 0 ]] && echo "ALL RAN" || echo "SOME ROWS FAILED (above)"
} | tee "$out/results.txt"
exit $status
