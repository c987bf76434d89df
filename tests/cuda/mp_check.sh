#!/usr/bin/env bash
# Issue 17 on a 4-GPU machine: tensor and pipeline parallel on cuda, the tp
# collectives on NCCL group communicators (ABI 1.7).
#
#   tests/cuda/mp_check.sh BUILD_DIR OUT_DIR
#
# a) Equality, f32, 20 steps: the tiny Llama (GQA 4/2) and GPT-2 fixtures,
#    one process on cuda:0 against --tp 2 (2 ranks), --tp 2 --pp 2 (4 ranks),
#    --pp 2 (2 ranks), and also --tp 2 x dp 2, --pp 2 x dp 2 (4 ranks) and
#    --tp 4 (Llama only: GPT-2's fixture has 2 heads), --tp 2 --zero 1
#    x dp 2 and --pp 2 --zero 1 x dp 2 (ZeRO-1 over the replicas), each
#    with the global
#    batch of its one-process reference (4 rows; the pipelines' 2
#    micro-batches of 2 rows against one process with --grad-accum 2; pp 2 x
#    dp 2: 8 rows against --grad-accum 4). PASS when every step's loss is
#    within 1e-5 relative; the worst gap is printed.
# b) Speed: a Llama-3.2-1B-shaped model (`--preset llama-1b` over a
#    vocabulary of 128256: hidden 2048, 16 layers, 32 heads, 8 kv heads,
#    intermediate 8192, tied, rope theta 500000, llama3 scaling), T=2048,
#    bf16-mixed, 4 rows per data-parallel replica (the pipeline: 4
#    micro-batches of 1), STEPS (20) steps: dp4, tp2 x dp2, pp2 x dp2, tp4.
#    tokens/s (median after 5 steps), the run's measured peak device memory
#    (summary.txt, rank 0), the most nvidia-smi saw in use on any GPU, and the
#    pipeline's bubble line. Then PyTorch (bench/pytorch_dist_train.py under
#    torchrun --nproc_per_node 4): transformers' LlamaForCausalLM of the same
#    config, bf16 autocast, fused AdamW, SDPA, torch.compile, 4 rows per GPU:
#    DDP, FSDP2 FULL_SHARD and SHARD_GRAD_OP. One table at the end.
#
# NGPUS (4) sets the machine's size: with NGPUS=2, part a runs the 2-rank
# layouts only and part b compares dp2, tp2 and pp2 (and PyTorch on 2 GPUs),
# for hosts of two cards.
#
# Every launch is bounded (timeout -k 10 ${RUN_TIMEOUT:-180}; the speed runs
# ${BIG_TIMEOUT:-420}, torch.compile compiles in them): a hang fails its row,
# not the call. Environment: STEPS, RUN_TIMEOUT, BIG_TIMEOUT, PYTHON (python3
# with torch and transformers), TORCHRUN (torchrun), PEERS (the PyTorch rows:
# "ddp fsdp-full fsdp-grad"), SKIP_SPEED=1 (a only), SKIP_EQUAL=1 (b only),
# SPEEDS (the part-b rows to run, by name: "pp2 tp2"), LAYOUTS and MODELS
# (the part-a rows and fixtures to run: "pp2xdp2zero tp2", "gpt2"),
# BACKEND (cuda) and ONE_DEVICE (cuda:0): BACKEND=cpu ONE_DEVICE=cpu
# SKIP_SPEED=1 runs part a on the cpu backend, to check the script itself;
# BIG_PRESET and BIG_SEQ (llama-1b, 2048) shrink part b likewise.
# Exit status 0 when every check passed and every run finished.
set -uo pipefail
build=${1:?usage: mp_check.sh BUILD_DIR OUT_DIR}
out=${2:?usage: mp_check.sh BUILD_DIR OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ty=$build/bin/trainyard
steps=${STEPS:-20}
backend=${BACKEND:-cuda}
one_dev=${ONE_DEVICE:-cuda:0}
big_preset=${BIG_PRESET:-llama-1b}
big_seq=${BIG_SEQ:-2048}
py=${PYTHON:-python3}
ngpus=${NGPUS:-4}
torchrun=${TORCHRUN:-torchrun}
export TRAINYARD_BACKEND_PATH=$build/lib/trainyard/backends
export NCCL_NVLS_ENABLE=0
mkdir -p "$out"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE
     -x TRAINYARD_BACKEND_PATH -x LD_LIBRARY_PATH -x PATH)
tmo=(timeout -k 10 "${RUN_TIMEOUT:-180}")
big_tmo=(timeout -k 10 "${BIG_TIMEOUT:-420}")
status=0
failed=()
fail() { failed+=("$1"); status=1; echo "FAIL: $1"; }

# shellcheck source=tests/cuda/dist_lib.sh
source "$here/dist_lib.sh"
# Runs "$@" (a launch) with its output in LOG; on failure prints the tail.
launch() {
  local log=$1 what=$2
  shift 2
  "$@" >"$log" 2>&1
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    [[ $rc -eq 124 || $rc -eq 137 ]] && what="$what (timed out)"
    fail "$what: exit $rc; see $log"
    grep -E "error|Error|FAILED|fail" "$log" | head -8 | sed 's/^/    /'
    tail -5 "$log" | sed 's/^/    /'
    return 1
  fi
}

nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader \
  >"$out/cards.txt" 2>&1
echo "cards:"; sed 's/^/  /' "$out/cards.txt"
gpus=$(grep -c . "$out/cards.txt" 2>/dev/null || echo 0)
[[ $gpus -ge $ngpus ]] || echo "WARNING: $gpus GPUs listed; this check wants $ngpus"

# ---- a) equality on the fixtures ----
"$py" - "$out/ids.jsonl" <<'PY'
import json, random, sys
r = random.Random(1)
with open(sys.argv[1], "w") as f:
    for _ in range(400):
        s, st, n = r.randrange(90), r.choice([1, 2, 3]), r.randrange(8, 40)
        f.write(json.dumps([(s + i * st) % 90 for i in range(n)]) + "\n")
PY
"$ty" data prepare --format ids --vocab-size 96 --eos-id 95 --input "$out/ids.jsonl" \
  --seq-len 16 --out "$out/tiny" --force >/dev/null || { echo "data prepare failed"; exit 1; }
compare_eq() { # reference losses, run losses, label
  awk -v label="$3" -v want="$steps" 'FNR == NR {a[$1] = $2; next}
       ($1 in a) {d = $2 - a[$1]; if (d < 0) d = -d; r = d / (a[$1] < 0 ? -a[$1] : a[$1]); n++;
                  if (r > w) {w = r; at = $1}}
       END {ok = n == want && w <= 1e-5
            printf "  %-34s %2d steps, worst relative loss gap %.3g at step %d: %s\n", label, n, w,
                   at, ok ? "PASS" : "FAIL"; exit !ok}' "$1" "$2"
}
eq_rows=()
read -ra models <<<"${MODELS:-llama gpt2}"
[[ ${SKIP_EQUAL:-0} == 1 ]] && models=()
picked() { [[ -z ${LAYOUTS:-} || " $LAYOUTS " == *" $1 "* ]]; }
for model in "${models[@]}"; do
  common=(train --model "$root/tests/fixtures/models/$model" --data "$out/tiny" --max-steps "$steps"
          --lr 2e-3 --dropout 0 --log-every 1 --cache-dir none --schedule constant)
  echo "== a) equality: $model, f32, $steps steps, on $backend (one process: $one_dev)"
  # references on cuda:0: 4 rows at once (one), 2 micro-batches of 2 (acc:
  # the pipelines' schedule, and 2 replicas of 2 rows), 4 of 2 (acc4: 2
  # pipeline replicas of 2 micro-batches)
  # name:ranks:reference:flags
  layouts=("tp2:2:one:--tp 2 --batch-size 4"
           "tp2xdp2:4:acc:--tp 2 --batch-size 2"
           "pp2:2:acc:--pp 2 --batch-size 2 --grad-accum 2"
           "pp2xdp2:4:acc4:--pp 2 --batch-size 2 --grad-accum 2"
           "tp2xpp2:4:acc:--tp 2 --pp 2 --batch-size 2 --grad-accum 2"
           "tp2xdp2zero:4:acc:--tp 2 --zero 1 --batch-size 2"
           "pp2xdp2zero:4:acc4:--pp 2 --zero 1 --batch-size 2 --grad-accum 2"
           "pp2i:2:acc4:--pp 2 --pp-schedule interleaved --batch-size 2 --grad-accum 4")
  [[ $model == llama ]] && layouts+=("tp4:4:one:--tp 4 --batch-size 4")
  refs=" "
  for l in "${layouts[@]}"; do
    IFS=: read -r name n ref flags <<<"$l"
    picked "$name" && refs+="$ref "
  done
  for ref in "one:--batch-size 4" "acc:--batch-size 2 --grad-accum 2" \
             "acc4:--batch-size 2 --grad-accum 4"; do
    IFS=: read -r name flags <<<"$ref"
    [[ $refs == *" $name "* ]] || continue
    # shellcheck disable=SC2086
    launch "$out/eq-$model-$name.log" "$model: one process ($flags)" \
      "${tmo[@]}" "$ty" "${common[@]}" --backend "$one_dev" $flags --out "$out/eq-$model-$name"
    losses "$out/eq-$model-$name/metrics.jsonl" >"$out/eq-$model-$name.losses"
  done
  for l in "${layouts[@]}"; do
    IFS=: read -r name n ref flags <<<"$l"
    ((n <= ngpus)) && picked "$name" || continue
    run="$out/eq-$model-$name"
    # shellcheck disable=SC2086
    launch "$run.log" "$model $name" "${tmo[@]}" "${mpi[@]}" -np "$n" "$ty" "${common[@]}" \
      --backend "$backend" $flags --out "$run" || { eq_rows+=("$model $name: run failed"); continue; }
    grep -h "tensor parallel\|rank layout\|tp ops\|pipeline bubble" "$run.log" | head -3 |
      sed 's/^/    /'
    losses "$run/metrics.jsonl" >"$run.losses"
    line=$(compare_eq "$out/eq-$model-$ref.losses" "$run.losses" "$model $name ($n ranks)") ||
      fail "$model $name: losses differ"
    echo "$line"
    eq_rows+=("${line#  }")
  done
done

# ---- b) speed on a Llama-3.2-1B shape ----
speed_rows=()
if [[ ${SKIP_SPEED:-0} != 1 ]]; then
  echo "== b) speed: $big_preset (vocab 128256) bf16-mixed T=$big_seq, 4 rows per replica, $steps steps"
  tokens=$(( (steps + 2) * 16 * 2049 * 5 / 4 ))
  synth_ids "$out/big.jsonl" "$tokens" 128000 512 3000 7
  "$ty" data prepare --format ids --vocab-size 128256 --eos-id 128001 --input "$out/big.jsonl" \
    --seq-len "$big_seq" --out "$out/big" --force >/dev/null || { echo "data prepare failed"; exit 1; }
  rm -f "$out/big.jsonl"
  big=(train --preset "$big_preset" --data "$out/big" --seq-len "$big_seq" --dtype bf16-mixed --dropout 0
       --max-steps "$steps" --log-every 1 --cache-dir "$out/cache" --save-every 0
       --backend "$backend")
  # name:flags (world NGPUS each)
  speeds=("dp4:--batch-size 4"
          "tp2xdp2:--tp 2 --batch-size 4"
          "pp2xdp2:--pp 2 --batch-size 1 --grad-accum 4"
          "tp4:--tp 4 --batch-size 4")
  ((ngpus == 2)) && speeds=("dp2:--batch-size 4" "tp2:--tp 2 --batch-size 4"
                            "pp2:--pp 2 --batch-size 1 --grad-accum 4")
  for s in "${speeds[@]}"; do
    IFS=: read -r name flags <<<"$s"
    [[ -z ${SPEEDS:-} || " $SPEEDS " == *" $name "* ]] || continue
    run="$out/speed-$name"
    t0=$SECONDS
    nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 \
      >"$run.smi" 2>/dev/null &
    smi=$!
    # shellcheck disable=SC2086
    launch "$run.log" "speed $name" "${big_tmo[@]}" "${mpi[@]}" -np "$ngpus" "$ty" "${big[@]}" $flags \
      --out "$run"
    ok=$?
    # the launch's wall time against the trainer's own account of it: the
    # difference is start-up, compile and the final save
    echo "    speed $name: exit $ok after $((SECONDS - t0)) s; $(grep -h '^time:' \
      "$run/summary.txt" 2>/dev/null | head -1)"
    kill "$smi" 2>/dev/null
    wait "$smi" 2>/dev/null
    tok=$(median_tok "$run/metrics.jsonl" 5)
    mem=$(sed -n 's/^measured peak device memory: \([0-9.]* [KMGT]*i*B\).*/\1/p' \
      "$run/summary.txt" 2>/dev/null | head -1)
    smi_mib=$(awk -F', *' '{if ($2 > m[$1]) m[$1] = $2} END {for (g in m) if (m[g] > x) x = m[g];
      print x + 0}' "$run.smi" 2>/dev/null)
    bubble=$(grep -h "^pipeline bubble" "$run.log" | head -1)
    [[ $ok -eq 0 && $tok == 0 ]] && fail "speed $name: no tokens/s in $run/metrics.jsonl"
    speed_rows+=("$(printf '%-24s %12.0f %12.0f %14s %12s' "trainyard $name" "$tok" \
      "$(awk -v t="$tok" -v n="$ngpus" 'BEGIN {print t / n}')" "${mem:-?}" "${smi_mib:-?}")")
    grep -h "tensor parallel:\|rank layout\|^  rank\|per rank\|tp ops" "$run.log" | head -8 |
      sed 's/^/    /'
    [[ -n $bubble ]] && { echo "    $bubble"; speed_rows+=("    $bubble"); }
  done
  peers=("ddp:--ddp" "fsdp-full:--fsdp --fsdp-strategy full" "fsdp-grad:--fsdp --fsdp-strategy grad")
  for p in "${peers[@]}"; do
    IFS=: read -r name flags <<<"$p"
    [[ " ${PEERS:-ddp fsdp-full fsdp-grad} " == *" $name "* ]] || continue
    log="$out/pytorch-$name.log"
    nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 \
      >"$log.smi" 2>/dev/null &
    smi=$!
    # shellcheck disable=SC2086
    launch "$log" "pytorch $name" "${big_tmo[@]}" "$torchrun" --standalone --nproc_per_node "$ngpus" \
      "$root/bench/pytorch_dist_train.py" --model "$big_preset" --batch 4 --seq "$big_seq" \
      --steps "$steps" --warmup 5 --compile $flags
    kill "$smi" 2>/dev/null
    wait "$smi" 2>/dev/null
    line=$(grep '^RESULT' "$log" | tail -1)
    tok=$(sed -n 's/.* tok_s=\([0-9.]*\).*/\1/p' <<<"$line")
    peak=$(sed -n 's/.* peak_mib=\([0-9]*\).*/\1/p' <<<"$line")
    smi_mib=$(awk -F', *' '{if ($2 > m[$1]) m[$1] = $2} END {for (g in m) if (m[g] > x) x = m[g];
      print x + 0}' "$log.smi" 2>/dev/null)
    speed_rows+=("$(printf '%-24s %12.0f %12.0f %14s %12s' "pytorch $name+compile" "${tok:-0}" \
      "$(awk -v t="${tok:-0}" -v n="$ngpus" 'BEGIN {print t / n}')" "${peak:-?} MiB" "${smi_mib:-?}")")
  done
fi

echo
echo "== results"
echo "a) equality (f32, $steps steps, per-step loss within 1e-5 relative)"
for r in "${eq_rows[@]}"; do echo "  $r"; done
if [[ ${#speed_rows[@]} -gt 0 ]]; then
  echo "b) speed: $big_preset T=$big_seq bf16-mixed on $ngpus GPUs, 4 rows per replica"
  printf '  %-24s %12s %12s %14s %12s\n' run "tokens/s" "per GPU" "peak (run)" "smi MiB max"
  for r in "${speed_rows[@]}"; do echo "  $r"; done
fi
if [[ $status -ne 0 ]]; then
  echo "FAILED (${#failed[@]}):"
  for f in "${failed[@]}"; do echo "  $f"; done
else
  echo "ALL PASSED"
fi
exit $status
