#!/usr/bin/env bash
# Issue 11 on a multi-GPU machine: data parallel on cuda through NCCL.
#
#   tests/cuda/dist_check.sh BUILD_DIR OUT_DIR [NGPUS...]
#
# 1. Equality: the tiny GPT-2 fixture, f32, 20 steps, global batch 4: one
#    process on cuda:0 with --batch-size 4, then mpirun -np 2 with
#    --batch-size 2 (rank k on cuda:k, gradients summed by NCCL on the
#    device): the fused step (all_reduce ops inside it) and the split step
#    (TRAINYARD_DEBUG_DIST_SPLIT=1: gradient graph, comm_all_reduce,
#    optimizer graph). PASS when every step's loss is within 1e-6 (relative).
# 2. Scaling: GPT-2 124M, bf16-mixed, T=1024, 16 rows per GPU, STEPS (50)
#    steps on 1 GPU and on each N of NGPUS (default "2"): tokens/s of the
#    whole run and per GPU (median of the logged steps after the first 5),
#    the split step's for comparison, and the loss of every step next to the
#    1-GPU run with the same global batch (1 GPU with --grad-accum N; PASS
#    within 1e-2 relative, bf16's tolerance); then the same N-GPU run with
#    --zero 1 (tokens/s, and the plan's per-rank optimizer state next to
#    plain DP's).
# 3. Bandwidth: PyTorch's NCCL all_reduce of the model's gradient bytes (124M
#    f32) on the same GPUs (bus bandwidth as nccl-tests count it), next to
#    what our step pays for its all-reduce (N-GPU step time - 1-GPU step
#    time, the whole gradient exchange, nothing overlapped).
set -uo pipefail
build=${1:?usage: dist_check.sh BUILD_DIR OUT_DIR [NGPUS...]}
out=${2:?usage: dist_check.sh BUILD_DIR OUT_DIR [NGPUS...]}
shift 2
ngpus=("${@:-2}")
ty=$build/bin/trainyard
steps=${STEPS:-50}
export TRAINYARD_BACKEND_PATH=$build/lib/trainyard/backends
export NCCL_NVLS_ENABLE=0
mkdir -p "$out"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE
     -x TRAINYARD_BACKEND_PATH -x LD_LIBRARY_PATH)
status=0
# Every run is bounded: a hang (a rank, NCCL at exit) fails its step, not the call.
tmo=(timeout -k 10 "${RUN_TIMEOUT:-150}")

# shellcheck source=tests/cuda/dist_lib.sh
source "$(dirname "$0")/dist_lib.sh"

# ---- 1. equality on the tiny fixture ----
python3 - "$out/ids.jsonl" <<'PY'
import json, random, sys
r = random.Random(1)
with open(sys.argv[1], "w") as f:
    for _ in range(400):
        s, st, n = r.randrange(90), r.choice([1, 2, 3]), r.randrange(8, 40)
        f.write(json.dumps([(s + i * st) % 90 for i in range(n)]) + "\n")
PY
"$ty" data prepare --format ids --vocab-size 96 --eos-id 95 --input "$out/ids.jsonl" \
  --seq-len 16 --out "$out/tiny" --force >/dev/null || exit 1
common=(train --model tests/fixtures/models/gpt2 --data "$out/tiny" --max-steps 20 --lr 2e-3
        --dropout 0 --log-every 1 --cache-dir none)
echo "== equality: 1 x B4 on cuda:0 vs 2 ranks x B2 (NCCL)"
"${tmo[@]}" "$ty" "${common[@]}" --backend cuda:0 --batch-size 4 --out "$out/eq-1" >"$out/eq-1.log" 2>&1 ||
  { echo "one process failed:"; tail -5 "$out/eq-1.log"; status=1; }
"${tmo[@]}" "${mpi[@]}" -np 2 "$ty" "${common[@]}" --backend cuda --batch-size 2 --out "$out/eq-2" \
  >"$out/eq-2.log" 2>&1 || { echo "2 ranks failed:"; tail -15 "$out/eq-2.log"; status=1; }
grep -i "nccl\|collective\|reduc" "$out/eq-2.log" | head -5
losses "$out/eq-1/metrics.jsonl" >"$out/eq-1.losses"
losses "$out/eq-2/metrics.jsonl" >"$out/eq-2.losses"
compare_eq() {
  awk 'FNR == NR {a[$1] = $2; next} ($1 in a) {d = $2 - a[$1]; if (d < 0) d = -d;
       r = d / (a[$1] < 0 ? -a[$1] : a[$1]); n++; if (r > w) {w = r; at = $1}}
       END {printf "compared %d steps; worst relative loss gap %.3g at step %d: %s\n", n, w, at,
            (n == 20 && w <= 1e-6) ? "PASS" : "FAIL"; exit !(n == 20 && w <= 1e-6)}' "$1" "$2"
}
compare_eq "$out/eq-1.losses" "$out/eq-2.losses" || status=1
echo "== equality: the split step (TRAINYARD_DEBUG_DIST_SPLIT=1), 2 ranks x B2"
"${tmo[@]}" "${mpi[@]}" -x TRAINYARD_DEBUG_DIST_SPLIT=1 -np 2 "$ty" "${common[@]}" --backend cuda \
  --batch-size 2 --out "$out/eq-2s" >"$out/eq-2s.log" 2>&1 ||
  { echo "2 ranks (split) failed:"; tail -15 "$out/eq-2s.log"; status=1; }
grep -i "all-reduced" "$out/eq-2s.log" | head -2
losses "$out/eq-2s/metrics.jsonl" >"$out/eq-2s.losses"
compare_eq "$out/eq-1.losses" "$out/eq-2s.losses" || status=1

# ---- 2. scaling on GPT-2 124M ----
tokens=$(( (steps + 2) * 16 * 1025 * 4 * 5 / 4 ))
synth_ids "$out/big.jsonl" "$tokens" 50256 16 240 3
"$ty" data prepare --format ids --vocab-size 50257 --eos-id 50256 --input "$out/big.jsonl" \
  --seq-len 1024 --out "$out/big" --force >/dev/null || exit 1
rm -f "$out/big.jsonl"
big=(train --preset gpt2-124m --data "$out/big" --seq-len 1024 --batch-size 16
     --dtype bf16-mixed --max-steps "$steps" --log-every 1 --cache-dir "$out/cache" --dropout 0)
echo "== scaling: GPT-2 124M bf16-mixed T=1024, 16 rows per GPU, $steps steps"
"${tmo[@]}" "$ty" "${big[@]}" --backend cuda:0 --out "$out/s-1" >"$out/s-1.log" 2>&1 ||
  { echo "1 GPU failed:"; tail -5 "$out/s-1.log"; status=1; }
one=$(median_tok "$out/s-1/metrics.jsonl" 5)
printf '%-8s %14s %14s %10s\n' GPUs "tokens/s" "per GPU" "scaling"
printf '%-8s %14.0f %14.0f %10s\n' 1 "$one" "$one" "1.00"
for n in "${ngpus[@]}"; do
  "${tmo[@]}" "${mpi[@]}" -np "$n" "$ty" "${big[@]}" --backend cuda --out "$out/s-$n" >"$out/s-$n.log" 2>&1 ||
    { echo "$n GPUs failed:"; tail -15 "$out/s-$n.log"; status=1; continue; }
  tok=$(median_tok "$out/s-$n/metrics.jsonl" 5)
  awk -v n="$n" -v t="$tok" -v o="$one" 'BEGIN {printf "%-8s %14.0f %14.0f %10.2f\n", n, t,
      t / n, (o > 0 ? t / n / o : 0)}'
  grep -h "all-reduced" "$out/s-$n.log" | head -1 | sed 's/^/  /'
  # the split step (gradient graph, NCCL, optimizer graph), for comparison
  "${tmo[@]}" "${mpi[@]}" -x TRAINYARD_DEBUG_DIST_SPLIT=1 -np "$n" "$ty" "${big[@]}" --backend cuda \
    --max-steps 20 --out "$out/sp-$n" >"$out/sp-$n.log" 2>&1 ||
    { echo "$n GPUs (split step) failed:"; tail -15 "$out/sp-$n.log"; status=1; }
  sptok=$(median_tok "$out/sp-$n/metrics.jsonl" 5)
  awk -v n="$n" -v t="$sptok" -v o="$one" 'BEGIN {printf "  split step on %d GPUs: %.0f tokens/s, %.0f per GPU, scaling %.3f\n", n, t, t / n, (o > 0 ? t / n / o : 0)}'
  # the same global batch on one GPU (grad-accum n): the loss curve to follow
  "${tmo[@]}" "$ty" "${big[@]}" --backend cuda:0 --grad-accum "$n" --out "$out/s-1x$n" \
    >"$out/s-1x$n.log" 2>&1 || { echo "1 GPU x accum $n failed"; status=1; continue; }
  losses "$out/s-1x$n/metrics.jsonl" >"$out/a.losses"
  losses "$out/s-$n/metrics.jsonl" >"$out/b.losses"
  awk -v n="$n" 'FNR == NR {a[$1] = $2; next} ($1 in a) {d = $2 - a[$1]; if (d < 0) d = -d;
       r = d / a[$1]; c++; if (r > w) {w = r; at = $1}}
       END {printf "  %d GPUs vs 1 GPU x accum %d: %d steps, worst relative loss gap %.3g at step %d: %s\n", n, n, c, w, at, (w <= 1e-2 ? "PASS" : "FAIL")}' \
    "$out/a.losses" "$out/b.losses"
  paste "$out/a.losses" "$out/b.losses" >"$out/curve-1x$n-vs-$n.txt"
  awk -v n="$n" -v t="$tok" -v o="$one" 'BEGIN {if (t > 0 && o > 0) printf "  our all-reduce costs %.2f ms per step (%.2f ms at %d GPUs - %.2f ms at 1)\n", 16384 * n / t * 1e3 - 16384 / o * 1e3, 16384 * n / t * 1e3, n, 16384 / o * 1e3}'
  # ZeRO-1: the same run with the optimizer state sharded
  "${tmo[@]}" "${mpi[@]}" -np "$n" "$ty" "${big[@]}" --backend cuda --zero 1 --out "$out/z-$n" \
    >"$out/z-$n.log" 2>&1 || { echo "$n GPUs ZeRO-1 failed:"; tail -15 "$out/z-$n.log"; status=1; continue; }
  ztok=$(median_tok "$out/z-$n/metrics.jsonl" 5)
  awk -v n="$n" -v t="$ztok" -v p="$tok" 'BEGIN {printf "  ZeRO-1 on %d GPUs: %.0f tokens/s (%.3f of plain data parallel)\n", n, t, (p > 0 ? t / p : 0)}'
  grep -h "^per rank" "$out/s-$n.log" | head -1 | sed 's/^/  plain:  /'
  grep -h "^per rank" "$out/z-$n.log" | head -1 | sed 's/^/  ZeRO-1: /'
  losses "$out/z-$n/metrics.jsonl" >"$out/z.losses"
  awk 'FNR == NR {a[$1] = $2; next} ($1 in a) {d = $2 - a[$1]; if (d < 0) d = -d; r = d / a[$1];
       c++; if (r > w) w = r} END {printf "  ZeRO-1 vs plain: %d steps, worst relative loss gap %.3g\n", c, w}' \
    "$out/b.losses" "$out/z.losses"
  # PyTorch's NCCL all-reduce of the same bytes on the same GPUs
  cat >"$out/all_reduce.py" <<'PY'

import os, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp
def work(rank, n):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    dist.init_process_group("nccl", rank=rank, world_size=n, device_id=torch.device("cuda", rank))
    torch.cuda.set_device(rank)
    x = torch.ones(124439808, dtype=torch.float32, device="cuda")
    for _ in range(5): dist.all_reduce(x)
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(20): dist.all_reduce(x)
    torch.cuda.synchronize(); t = (time.perf_counter() - t0) / 20
    if rank == 0:
        b = x.numel() * 4
        print(f"  PyTorch {torch.__version__} all_reduce of {b / 1e6:.0f} MB on {n} GPUs: "
              f"{t * 1e3:.2f} ms, algbw {b / t / 1e9:.1f} GB/s, busbw "
              f"{b / t / 1e9 * 2 * (n - 1) / n:.1f} GB/s", flush=True)
    dist.destroy_process_group()
if __name__ == "__main__":
    n = int(sys.argv[1]); mp.spawn(work, args=(n,), nprocs=n)
PY
  timeout 120 python3 "$out/all_reduce.py" "$n" 2>"$out/all_reduce-$n.log" ||
    { echo "  (PyTorch all_reduce failed)"; tail -3 "$out/all_reduce-$n.log"; }
done
exit $status
