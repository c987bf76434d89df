#!/usr/bin/env bash
# Issue 12's acceptance check of the opencl backend on a GPU: GPT-2 124M at
# 8192 tokens per step (B=8, T=1024), where an H100 through NVIDIA's OpenCL
# used to fail with CL error -9999 from 4096 tokens per step on.
#
#   bench/opencl_large_check.sh BUILD_DIR OUT_DIR
#
# Makes a dataset with the bundled tools (learnable pre-tokenized documents
# over the full vocabulary, so the logits are [B, T, 50257]), runs
#   trainyard train --preset gpt2-124m --backend opencl:0 --seq-len 1024
#                   --batch-size 8 --max-steps 20
# and the same run on cpu (same data, seed and schedule; stopped with SIGTERM,
# which ends a run cleanly, once it has logged the steps to compare), then
# compares the per-step losses: PASS when the opencl run did all its steps
# and each of the first CHECK_STEPS losses is within TOL (relative) of cpu's. With the
# gpt2-124m preset it also runs train_bench on the backend at the same shape
# (it used to abort with a stack smash). Prints a table and a verdict, and
# writes them to OUT_DIR/verdict.txt. Exit 0 pass, 1 fail, 2 usage.
#
# Environment (defaults: the acceptance run): PRESET (gpt2-124m), BATCH (8),
# SEQ (1024), VOCAB (50257), STEPS (20), CHECK_STEPS (5), REF_STEPS (the
# reference's steps before it is stopped: CHECK_STEPS), TOL (1e-4),
# BACKEND (opencl:0), REFERENCE (cpu), BENCH (auto: with gpt2-124m; 1, 0),
# MISSING_DEVICE_EXIT (1: the exit code when BACKEND is not a device that
# 'trainyard devices' lists; the test suite sets 77, its "skipped").
# A small run for a CPU OpenCL driver such as PoCL:
#   PRESET=gpt2-tiny VOCAB=512 BATCH=2 SEQ=64 STEPS=6 bench/opencl_large_check.sh build /tmp/x
# OUT_DIR must be new or empty, or a folder this script made before (its
# data and runs are then replaced).
set -euo pipefail

usage() {
  echo "usage: $0 BUILD_DIR OUT_DIR (see the comment at the top for the environment)" >&2
  exit 2
}
[[ $# -eq 2 ]] || usage
build=$1
out=$2
preset=${PRESET:-gpt2-124m}
batch=${BATCH:-8}
seq=${SEQ:-1024}
vocab=${VOCAB:-50257}
steps=${STEPS:-20}
check=${CHECK_STEPS:-5}
ref_steps=${REF_STEPS:-$check}
tol=${TOL:-1e-4}
backend=${BACKEND:-opencl:0}
reference=${REFERENCE:-cpu}
bench=${BENCH:-auto}
ty=$build/bin/trainyard
[[ -x $ty ]] || { echo "$0: $ty not found: build first" >&2; exit 2; }
for v in "$batch" "$seq" "$vocab" "$steps" "$check" "$ref_steps"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "$0: '$v' is not a positive integer" >&2; exit 2; }
done
((check <= steps)) || { echo "$0: CHECK_STEPS $check > STEPS $steps" >&2; exit 2; }
((check <= ref_steps)) || { echo "$0: CHECK_STEPS $check > REF_STEPS $ref_steps" >&2; exit 2; }
((vocab >= 16)) || { echo "$0: VOCAB $vocab is too small" >&2; exit 2; }
device=${backend%%\?*}
[[ $device == *:* ]] || device=$device:0
if ! "$ty" devices 2>/dev/null | grep -q "^ *${device//./\\.} "; then
  echo "$0: no device $device here ('$ty devices' says why)" >&2
  exit "${MISSING_DEVICE_EXIT:-1}"
fi
marker=$out/.opencl_large_check
if [[ -d $out && -n $(ls -A "$out") && ! -e $marker ]]; then
  echo "$0: $out is not empty and was not made by this script; choose a new folder" >&2
  exit 2
fi
mkdir -p "$out"
touch "$marker"
rm -rf "$out/data" "$out/ids.jsonl" "$out/run-"* "$out/"*.log "$out/verdict.txt"
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# ---- data: arithmetic runs of ids (learnable), EOS = vocab - 1 ----
tokens=$((steps * batch * (seq + 1) * 5 / 4 + 4096))
log "dataset: $tokens tokens of ids below $vocab"
awk -v tokens="$tokens" -v vocab="$vocab" 'BEGIN {
  srand(12); m = vocab - 1; done = 0
  while (done < tokens) {
    n = 16 + int(rand() * 240); s = int(rand() * m); st = 1 + int(rand() * 3)
    line = "["
    for (i = 0; i < n; ++i) line = line (i ? "," : "") ((s + i * st) % m)
    print line "]"
    done += n + 1
  }
}' > "$out/ids.jsonl"
"$ty" data prepare --format ids --vocab-size "$vocab" --eos-id $((vocab - 1)) \
  --input "$out/ids.jsonl" --seq-len "$seq" --val-fraction 0.02 --out "$out/data" \
  > "$out/data.log" 2>&1 || { cat "$out/data.log" >&2; exit 1; }

# ---- the two trainings ----
train() { # backend, steps to wait for (then SIGTERM) -> run folder
  local dir=$out/run-${1//[:?=&]/-}
  log "train $preset on $1: B=$batch T=$seq, $steps-step schedule, $2 steps -> $dir"
  local start=$SECONDS rc=0 pid
  "$ty" train --preset "$preset" --data "$out/data" --backend "$1" --seq-len "$seq" \
    --batch-size "$batch" --max-steps "$steps" --out "$dir" --cache-dir "$out/cache" \
    > "$dir.log" 2>&1 &
  pid=$!
  if (($2 < steps)); then
    while kill -0 "$pid" 2>/dev/null; do
      if [[ -f $dir/metrics.jsonl ]] && (($(grep -c '"loss"' "$dir/metrics.jsonl") >= $2)); then
        kill -TERM "$pid" 2>/dev/null || true
        break
      fi
      sleep 1
    done
  fi
  wait "$pid" || rc=$?
  log "  exit $rc after $((SECONDS - start)) s (log: $dir.log)"
  if ((rc != 0)); then tail -5 "$dir.log" >&2; fi
  echo "$dir"
}
dev_dir=$(train "$backend" "$steps")
ref_dir=$(train "$reference" "$ref_steps")

# step loss, one per line, from a run's metrics.jsonl
losses() {
  [[ -f $1/metrics.jsonl ]] || return 0
  sed -n 's/.*"step": \([0-9]*\),.*"loss": \([-+0-9.eE]*\|NaN\|Infinity\),.*/\1 \2/p' \
    "$1/metrics.jsonl"
}
losses "$ref_dir" > "$out/ref.losses"
losses "$dev_dir" > "$out/dev.losses"

# ---- verdict ----
bench_line=""
if [[ $bench == 1 || ($bench == auto && $preset == gpt2-124m) ]]; then
  log "train_bench on $backend at B=$batch T=$seq"
  rc=0
  "$build/bin/train_bench" --backend "$backend" --batch "$batch" --seq "$seq" --steps 2 \
    --warmup 1 > "$out/train_bench.log" 2>&1 || rc=$?
  if ((rc == 0)); then
    bench_line="train_bench on $backend at B=$batch T=$seq: ok ($(grep -o 'ms/step: *median [0-9.]*' "$out/train_bench.log" || echo 'no timing'))"
  else
    bench_line="train_bench on $backend at B=$batch T=$seq: FAILED, exit $rc: $(tail -1 "$out/train_bench.log")"
  fi
fi
awk -v check="$check" -v steps="$steps" -v tol="$tol" -v ref="$reference" -v dev="$backend" \
    -v bench="$bench_line" -v cfg="$preset B=$batch T=$seq ($((batch * seq)) tokens/step)" '
  FNR == NR { r[$1] = $2; nr++; next }
  { d[$1] = $2; nd++ }
  END {
    printf "%s: %s vs %s\n", cfg, dev, ref
    printf "%5s %14s %14s %10s %10s\n", "step", "loss " ref, "loss " dev, "abs", "rel"
    ok = 1; worst = 0; at = 0
    for (s = 1; s <= steps; ++s) {
      if (!(s in d) && !(s in r)) continue
      rv = (s in r) ? r[s] : "-"; dv = (s in d) ? d[s] : "-"
      if ((s in r) && (s in d)) {
        a = dv - rv; if (a < 0) a = -a
        rel = rv != 0 ? a / (rv < 0 ? -rv : rv) : a
        printf "%5d %14.8f %14.8f %10.3g %10.3g%s\n", s, rv, dv, a, rel, s <= check ? "" : "  (not checked)"
        if (s <= check) {
          if (!(rel <= tol)) ok = 0
          if (rel > worst || at == 0) { worst = rel; at = s }
        }
      } else if (s in d) {
        if (!first) first = s
        last = s
      }
    }
    if (first) printf "%s also ran steps %d..%d (loss %.6f at step %d)\n", dev, first, last, d[last], last
    why = ""
    if (nd != steps) { ok = 0; why = why sprintf("; %s logged %d of %d steps", dev, nd, steps) }
    if (nr < check) { ok = 0; why = why sprintf("; %s logged %d steps, fewer than %d", ref, nr, check) }
    for (s = 1; s <= check; ++s) if (!(s in d) || !(s in r)) { ok = 0 }
    if (bench ~ /FAILED/) { ok = 0; why = why "; train_bench failed" }
    if (bench != "") print bench
    w = at ? sprintf(" (worst %.3g at step %d)", worst, at) : ""
    if (ok) printf "PASS: %s ran %d steps; its first %d losses are within %g (relative) of %s'"'"'s%s\n", dev, nd, check, tol, ref, w
    else printf "FAIL: %s vs %s: the first %d losses must match within %g (relative)%s%s\n", dev, ref, check, tol, why, w
    exit ok ? 0 : 1
  }' "$out/ref.losses" "$out/dev.losses" | tee "$out/verdict.txt"
exit "${PIPESTATUS[0]}"
