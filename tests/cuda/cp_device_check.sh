#!/usr/bin/env bash
# Issue 31 on GPUs: context parallel's ops on the cuda backend (not run in
# CI; the CPU emulator entries cuda_emu_conform_cp_*, cuda_attention_emu and
# cuda_emu_kernels_test_* hold the same ops there).
#
#   tests/cuda/cp_device_check.sh BUILD_DIR OUT_DIR
#
# 1. Conformance on cuda:0, f32 and bf16: attention and attention_backward
#    (their causal=0 cases full-gqa, full-short among them),
#    attention_merge (+ backward), dropout (+ backward, the seq-numbered
#    cases), all_gather and reduce_scatter (parts = 1). PASS when no case
#    fails and none is unsupported.
# 2. attention_cuda_test on cuda:0: every TRAINYARD_CUDA_ATTENTION mode
#    against the f64 reference, its causal=0 cases (full-*) included
#    (modes mma and auto run the mma.sync kernels' _full instances on them,
#    bf16 at head dim 64 in full-tc-shape).
# 3. With 2 or more GPUs: `train --cp 2` on 2 ranks (rank k on cuda:k, the
#    gathers on NCCL over the cp group's communicator) against one process on
#    cuda:0, the tiny Llama fixture (GQA), f32, 20 steps, global batch 4,
#    without and with --dropout 0.1 (the numbered masks): PASS when every
#    step's loss is within 1e-5 relative (tests/apps/
#    test_context_parallel_cli.py MatchTest's bound on cpu); then bf16-mixed
#    without dropout, within 2e-2 (bf16's rounding of the partials); and
#    --cp 2 --zero 2 (each gradient's sum an NCCL all_reduce inside the
#    gradient graph) with dropout, within 1e-5.
# 4. With 4 or more GPUs: --cp 2 --tp 2, --cp 2 with 2 data-parallel
#    replicas under ZeRO-1, and --cp 2 --pp 2, each with dropout against
#    one process on the same global batch (1e-5): the cp and dp_cp groups'
#    device communicators; and --cp 2 x 2 replicas under ZeRO-2.
set -uo pipefail
build=${1:?usage: cp_device_check.sh BUILD_DIR OUT_DIR}
out=${2:?usage: cp_device_check.sh BUILD_DIR OUT_DIR}
ty=$build/bin/trainyard
# shellcheck source=tests/cuda/dist_lib.sh
source "$(dirname "$0")/dist_lib.sh"
dist_env "$build"
mkdir -p "$out"
status=0
tmo=(timeout -k 10 "${RUN_TIMEOUT:-300}")

# ---- 1. conformance ----
for ops in 'attention*' 'dropout*' all_gather reduce_scatter; do
  for dt in f32 bf16; do
    log="$out/conform-${ops//\*/}-$dt.log"
    "${tmo[@]}" "$ty" conform --backend cuda:0 --ops "$ops" --dtype "$dt" >"$log" 2>&1
    rc=$?
    summary=$(grep '^summary:' "$log")
    echo "== conform $ops $dt: ${summary:-no summary (rc $rc)}"
    if [ $rc -ne 0 ] || ! grep -q ' 0 fail, 0 unsupported' <<<"$summary"; then
      grep -E ' (fail|unsupported) ' "$log" | head -10
      status=1
    fi
  done
done

# ---- 2. the attention kernels' own test ----
echo "== attention_cuda_test (causal=0 cases: full-*)"
"${tmo[@]}" "$build/tests/attention_cuda_test" >"$out/attention_cuda_test.log" 2>&1
rc=$?
grep -c '^full-' "$out/attention_cuda_test.log" | sed 's/^/causal=0 cases run: /'
grep 'FAIL' "$out/attention_cuda_test.log" | head -20
tail -1 "$out/attention_cuda_test.log"
[ $rc -eq 0 ] || { echo "attention_cuda_test failed (rc $rc)"; status=1; }

# ---- 3. --cp 2 on 2 GPUs against one ----
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$gpus" -lt 2 ]; then
  echo "== --cp 2: skipped ($gpus GPU)"
  echo "cp_device_check: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
  exit $status
fi
synth_ids "$out/ids.jsonl" 8000 90 8 32 3
"$ty" data prepare --format ids --vocab-size 96 --eos-id 95 --input "$out/ids.jsonl" \
  --seq-len 16 --out "$out/tiny" --force >/dev/null || exit 1
common=(train --model tests/fixtures/models/llama --data "$out/tiny" --max-steps 20 --lr 2e-3
        --schedule constant --batch-size 4 --log-every 1 --cache-dir none)
# NAME BOUND NP "ONE-PROCESS ARGS" ARGS...: one process on cuda:0 with the
# common and the one-process args, NP ranks with the common args and ARGS
run_case() {
  local name=$1 bound=$2 np=$3 one=$4
  shift 4
  # shellcheck disable=SC2086 # the one-process args are words
  "${tmo[@]}" "$ty" "${common[@]}" $one --backend cuda:0 --out "$out/$name-1" \
    >"$out/$name-1.log" 2>&1 || { echo "$name: one process failed:"; tail -5 "$out/$name-1.log"; status=1; return; }
  "${tmo[@]}" "${mpi[@]}" -np "$np" "$ty" "${common[@]}" "$@" --backend cuda \
    --out "$out/$name-n" >"$out/$name-n.log" 2>&1 ||
    { echo "$name: $np ranks failed:"; tail -15 "$out/$name-n.log"; status=1; return; }
  losses "$out/$name-1/metrics.jsonl" >"$out/$name-1.loss"
  losses "$out/$name-n/metrics.jsonl" >"$out/$name-n.loss"
  read -r n worst at < <(worst_gap "$out/$name-1.loss" "$out/$name-n.loss")
  local ok
  ok=$(awk -v w="$worst" -v b="$bound" -v n="$n" 'BEGIN {print (n == 20 && w <= b) ? 1 : 0}')
  echo "== $name ($np ranks: $*): $n steps compared, worst relative loss gap $worst (step $at), bound $bound"
  grep -E "ranks = dp|rank layout \(world|device communicators|dp_cp" "$out/$name-n.log" | head -3
  [ "$ok" = 1 ] || status=1
}
cp_case() { # NAME BOUND ARGS...: --cp 2 on 2 GPUs
  local name=$1 bound=$2
  shift 2
  run_case "cp2-$name" "$bound" 2 "$*" "$@" --cp 2
}
cp_case f32 1e-5 --dropout 0
cp_case f32-dropout 1e-5 --dropout 0.1
cp_case bf16-mixed 2e-2 --dropout 0 --dtype bf16-mixed
# ZeRO-2 (each gradient summed over dp x cp by the gradient graph's own
# NCCL all_reduce as backward completes it, the owner's accumulator alone)
run_case cp2-zero2 1e-5 2 "--dropout 0.1" --dropout 0.1 --cp 2 --zero 2
# ---- 4. with 4 GPUs: cp with tp, with data parallel (and ZeRO-1), with pp:
# the device communicators of the cp and dp_cp groups beside dp, tp, pp ----
if [ "$gpus" -ge 4 ]; then
  run_case cp2-tp2 1e-5 4 "--dropout 0.1" --dropout 0.1 --cp 2 --tp 2
  run_case cp2-dp2-zero 1e-5 4 "--dropout 0.1 --batch-size 2 --grad-accum 2" \
    --dropout 0.1 --batch-size 2 --cp 2 --zero 1
  run_case cp2-pp2 1e-5 4 "--dropout 0.1 --grad-accum 2" --dropout 0.1 --grad-accum 2 \
    --cp 2 --pp 2
  run_case cp2-dp2-zero2 1e-5 4 "--dropout 0.1 --batch-size 2 --grad-accum 2" \
    --dropout 0.1 --batch-size 2 --cp 2 --zero 2
else
  echo "== --cp with --tp, data parallel, --pp: skipped ($gpus GPUs, 4 needed)"
fi
echo "cp_device_check: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
