#!/usr/bin/env bash
# Everything the cuda backend must show on a GPU machine, in one call of the
# device tool (see docs/cuda.md, "Testing on a GPU"): the build is made on
# the development machine (scripts/build-device.sh) and carried; this script
# runs from the repository root there and writes logs under $OUT.
#
#   tests/cuda/device_run.sh BUILD_DIR PHASE...
#
# Phases (each bounded by its own timeout, logs in $OUT/<phase>.log):
#   info       nvidia-smi, trainyard devices
#   conform    trainyard conform --backend cuda:0 (every op, f32/bf16/f16,
#              forward and backward, op and whole-graph tiers) -> conform.json
#   suites     tests/backends/test_cuda_cli.py: forward vs transformers,
#              generate vs cpu, train/compare vs cpu, bf16-mixed, exact
#              resume, faults
#   sanitizer  compute-sanitizer memcheck and racecheck on conform, on the
#              attention kernels (attention_cuda_test: every path) and on
#              training steps (f32, and bf16-mixed over 1024 rows: the
#              executor's fused paths)
#   attention  tests/cuda/attention_cuda_test (the generic, mma.sync and,
#              on compute capability 9.0, wgmma paths against the f64
#              reference, bit equality run to run), then its --bench
#   profile    train_bench bf16-mixed with TRAINYARD_PROFILE=1 (per-op
#              times) on PROFILE="model:batch:seq" (gpt2-124m:16:1024),
#              then PyTorch torch.compile's kernels for the same step
#              (torch.profiler)
#   mixed      bf16-mixed forward errors next to PyTorch autocast's
#              (tests/cuda/mixed_vs_autocast.py)
#   bench      bench/cuda_bench.sh (Trainyard vs PyTorch eager/compile)
#   copies     the bf16 weight copies kept by the optimizer (issue 30): the
#              emulator's bit-for-bit check on the card (train_bench, 50
#              steps, copies on against TRAINYARD_CUDA_WEIGHT_COPIES=0: the
#              loss curves must be equal) and their speed, one build against
#              itself with the switch off (bench/ab_builds.sh, COPIES_ROW,
#              default gpt2-124m:16:1024, 5 rounds), then the executable
#              report's copies line
#   opencl     issue 12's check: gpt2-124m on opencl:0 (NVIDIA's OpenCL)
#              against cpu
#   serve      bench/serve_bench.py on cuda:0 (GPT-2 124M and a ~1B Llama
#              shape, random weights, bf16): concurrency 1, 8, 32 against
#              sequential requests, time to first token, and transformers'
#              generate on the same card for the same batch
#   memory     issue 13 (logs in $OUT/memory/): the levers' ops' conformance
#              (f32/bf16/f16), the tiny fixtures with each lever against cpu
#              (tests/cuda/levers_vs_cpu.py), llama-7b T=2048 B=1 on real
#              text under memory_limit=24GiB (bf16, Adafactor, fused
#              optimizer, recompute layer, loss chunk; 20 steps), llama-1b
#              at T = 32K, 64K, 128K (3 steps each, up to the first that
#              does not fit), and PyTorch's longest T for llama-1b
#              (transformers + SDPA + gradient checkpointing, bf16 +
#              Adafactor); (f) llama-1b at 256K tokens (--max-positions
#              262144, 2 steps: issue 31's "256K fits on one H100").
#              MEMORY_TIME scales every timeout (default 1); MEMORY_PARTS
#              picks parts (default "a e b c d f").
#   numerics   issue 34's tools on cuda: compare --per-layer cpu against
#              cuda:0 (the GPT-2 and Llama fixtures, f32), a checkpoint
#              resumed cpu -> cuda -> cpu against one cpu run
#              (test_cross_device_resume_cli.py with its legs set), and
#              --check-numerics naming an overflowing layer on cuda:0
#              (forward and train) with a clean run's losses unchanged
#   multihost  issue 36 on the GPU: tests/multihost/test_multihost_cli.py's
#              MatchTests (environment launch and mpirun --hostfile across
#              two network-namespace hosts) with every rank on cuda and
#              NCCL between the hosts over its socket transport on the
#              veth (NCCL_SOCKET_IFNAME=eth0; NCCL_DEBUG=INFO's transport
#              lines are kept); needs root and `ip netns`
#   deterministic  issue 34 on cuda (logs also in $OUT/deterministic-*):
#              (a) cuda_emu_deterministic_test with TY_DET_DEVICE=1: GPT-2's
#              matmul shapes (bf16, f32) at M = 1..1000 against M = 1024 and
#              attention rows (decode over a cache against prefill, block,
#              chunk), bitwise under deterministic=1, the default mode's
#              differences printed; (b) tests/cuda/deterministic_serve.py:
#              serve --deterministic on a random GPT-2 124M (bf16), 256
#              requests one at a time then all at once, tokens and logprobs
#              bit for bit, and the same server without the flag (tokens/s
#              of both and the ratio); (c) train tok/s (same model,
#              bf16-mixed, B=8 T=256, 20 steps) with and without
#              --deterministic, and the ratio
#   crossdev   issue 34's cross-device points: cpu_gemm_stream_test (the
#              deterministic cpu GEMM on this host's ISAs, AVX-512 where
#              present), a checkpoint resumed cuda ->
#              cpu -> cuda against one cpu run, and 50 steps of train
#              --deterministic --dtype f32 on cpu and cuda:0 (GPT-2 and Llama
#              fixtures) whose step losses must agree within 1e-6
# Environment: SUITES (which suites), CONFORM_OPS (a --ops pattern),
# SANITIZER_TOOLS (default "memcheck racecheck initcheck").
set -uo pipefail
build=${1:?usage: device_run.sh BUILD_DIR PHASE...}
shift
out=${OUT:-/tmp/ty-device-out}
mkdir -p "$out"
ty=$build/bin/trainyard
export PYTHONUNBUFFERED=1
export TRAINYARD_BACKEND_PATH=$build/lib/trainyard/backends
models=tests/fixtures/models
# Libraries the GPU machine lacks (libmicrohttpd), carried in BUILD/lib/deps
# by scripts/build-device.sh: used only where the system has none.
if ldd "$ty" 2>/dev/null | grep -q "not found"; then
  export LD_LIBRARY_PATH=$build/lib/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

phase_info() {
  nvidia-smi || true
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
  "$ty" --version
  "$ty" devices
}

phase_conform() {
  local ops=()
  [[ -n ${CONFORM_OPS:-} ]] && ops=(--ops "$CONFORM_OPS")
  "$ty" conform --backend cuda:0 --tier all "${ops[@]}" --json >"$out/conform.json"
  local rc=$?
  python3 - "$out/conform.json" <<'PY'
import json, sys, collections
rows = json.load(open(sys.argv[1]))
bad = [r for r in rows if r["status"] != "pass"]
by = collections.Counter((r["status"]) for r in rows)
print("conform cuda:0: %d cases, %s" % (len(rows), dict(by)))
for r in bad[:80]:
    print("  %-22s %-20s %-5s %-8s %-11s %s %s" % (r["op"], r["case"], r["dtype"], r["direction"],
          r["status"], r.get("nmse", ""), r.get("reason", "")[:150]))
PY
  return $rc
}

phase_suites() {
  local suites=${SUITES:-"DevicesTest ForwardTest GenerateTest TrainTest MixedPrecisionTest ResumeTest TensorCoreTest FaultTest"}
  local rc=0
  for s in $suites; do
    echo "== $s"
    timeout 600 python3 tests/backends/test_cuda_cli.py --trainyard "$ty" --models "$models" \
      --fatbin-sm80 "$build/tests/cuda-fatbin-sm80" --fatbin-test "$build/tests/cuda-fatbin-test" \
      "$s" 2>&1 | tail -60
    # 77: the suite ran and skipped some test, saying why (tests/common/unittest_exit.py)
    local code=${PIPESTATUS[0]}
    ((code != 0 && code != 77)) && rc=1
  done
  return $rc
}

phase_sanitizer() {
  local cs=compute-sanitizer
  command -v $cs >/dev/null || cs=/usr/local/cuda/bin/compute-sanitizer
  for tool in ${SANITIZER_TOOLS:-memcheck racecheck initcheck}; do
    echo "== $tool: conform"
    [[ $tool == initcheck ]] || timeout 400 $cs --tool $tool --error-exitcode 9 --print-limit 20 \
      "$ty" conform --backend 'cuda:0?graphs=0' ${CONFORM_OPS:+--ops "$CONFORM_OPS"} 2>&1 | tail -15
    echo "== $tool: 2 training steps (gpt2 fixture)"
    timeout 300 $cs --tool $tool --error-exitcode 9 --print-limit 20 \
      "$ty" train --model $models/gpt2 --data /tmp/ty-ids --out /tmp/ty-san-$tool --max-steps 2 \
      --batch-size 4 --dropout 0.1 --backend 'cuda:0?graphs=0' --cache-dir none 2>&1 | tail -8
    # The attention kernels of every path (the fixtures' head dims are below
    # the tensor-core kernels' 64 and 128): attention_cuda_test's cases.
    echo "== $tool: attention kernels (generic, mma.sync, wgmma)"
    [[ $tool == initcheck ]] || timeout 400 $cs --tool $tool --error-exitcode 9 --print-limit 20 \
      "$build/tests/attention_cuda_test" 2>&1 | tail -4
    # bf16-mixed over 1024 rows: every fusion of backends/cuda/cuda_fuse.c
    # (GEMM epilogues, norm + cast, the one-pass norm backward chain) runs
    echo "== $tool: 2 bf16-mixed training steps, 1024 rows (the fused paths)"
    timeout 300 $cs --tool $tool --error-exitcode 9 --print-limit 20 \
      "$ty" train --model $models/gpt2 --data /tmp/ty-ids --out /tmp/ty-san-mixed-$tool \
      --max-steps 2 --batch-size 64 --dtype bf16-mixed --backend 'cuda:0?graphs=0' \
      --cache-dir none 2>&1 | tail -8
  done
}

prepare_ids() {
  python3 - /tmp/ty-ids.jsonl <<'PY'
import json, random, sys
r = random.Random(1)
with open(sys.argv[1], "w") as f:
    for _ in range(300):
        s, st, n = r.randrange(90), r.choice([1, 2, 3]), r.randrange(8, 40)
        f.write(json.dumps([(s + i * st) % 90 for i in range(n)]) + "\n")
PY
  "$ty" data prepare --format ids --vocab-size 96 --eos-id 95 --input /tmp/ty-ids.jsonl \
    --seq-len 16 --val-fraction 0.15 --out /tmp/ty-ids >/dev/null
}

phase_attention() {
  timeout 300 "$build/tests/attention_cuda_test" 2>&1 | tail -60
  local rc=${PIPESTATUS[0]}
  timeout 200 "$build/tests/attention_cuda_test" --bench 2>&1 | tail -40
  return $rc
}

phase_profile() {
  # PROFILE="model:batch:seq" (default gpt2-124m:16:1024): our per-kernel table
  # (TRAINYARD_PROFILE=1), then PyTorch's for the same step (torch.compile,
  # the minimal GPT-2 for GPT-2 models) under torch.profiler.
  local model batch seq impl=()
  IFS=: read -r model batch seq <<<"${PROFILE:-gpt2-124m:16:1024}"
  [[ $model == gpt2-* ]] && impl=(--impl minimal)
  TRAINYARD_PROFILE=1 timeout 300 "$build/bin/train_bench" --backend cuda:0 --model "$model" \
    --dtype bf16-mixed --batch "$batch" --seq "$seq" --steps 5 --warmup 2 --peak-tflops 989 \
    2>&1 | tail -75
  timeout 200 "$build/bin/train_bench" --backend cuda:0 --model "$model" --dtype bf16-mixed \
    --batch "$batch" --seq "$seq" --steps 10 --warmup 3 --peak-tflops 989 2>&1 | tail -12
  timeout 400 python3 bench/pytorch_cuda_train.py --model "$model" --batch "$batch" \
    --seq "$seq" --steps 10 --warmup 5 --compile "${impl[@]}" --peak-tflops 989 --profile 3 \
    2>/dev/null | tail -40
}

phase_mixed() {
  timeout 300 python3 tests/cuda/mixed_vs_autocast.py --trainyard "$ty" --models "$models"
}

phase_bench() {
  timeout 560 bench/cuda_bench.sh "$build" "$out/bench"
}

phase_copies() {
  STEPS=45 OLD_ENV=TRAINYARD_CUDA_WEIGHT_COPIES=0 OUT="$out/copies" timeout 560 \
    bench/ab_builds.sh "$build" "$build" "${COPIES_ROW:-gpt2-124m:16:1024}" 5
  local rc=$?
  grep -q "(equal at every step)" "$out/copies/loss-curves.txt" 2>/dev/null || rc=1
  # train_bench prints the executable's report after its RESULT line
  for side in old new; do
    echo "== $side (round 1):"
    grep -E "weights kept|device memory" "$out/copies/$side-1.log" || true
  done
  return $rc
}

phase_opencl() {
  mkdir -p /tmp/icd && echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/tmp/icd/nvidia.icd
  export OCL_ICD_VENDORS=/tmp/icd
  # The NVIDIA device: the machines may list PoCL's CPU device first.
  local dev
  dev=$("$ty" devices 2>/dev/null | awk '$1 ~ /^opencl:/ && /NVIDIA/ {print $1; exit}')
  if [[ -z $dev ]]; then
    echo "no NVIDIA OpenCL device in 'trainyard devices'"
    "$ty" devices
    return 1
  fi
  echo "NVIDIA OpenCL device: $dev"
  if [[ -x bench/opencl_large_check.sh ]]; then
    BACKEND=$dev timeout 500 bench/opencl_large_check.sh "$build" "$out/opencl"
  else
    echo "bench/opencl_large_check.sh is missing"
    return 1
  fi
}

phase_serve() {
  local rc=0
  for shape in gpt2-124m llama-1b; do
    echo "== $shape"
    timeout 280 python3 bench/serve_bench.py --trainyard "$ty" --random "$shape" \
      --backend cuda:0 --dtype bf16 --transformers --device cuda:0 --concurrency 1,8,32 \
      --work "/tmp/serve-bench-$shape" --json-out "$out/serve-$shape.json" || rc=1
  done
  # The engine alone (no HTTP): what the server adds to the first token.
  echo "== engine_bench gpt2-124m"
  timeout 120 "$build/bin/engine_bench" --preset gpt2-124m --random-weights --backend cuda:0 \
    --plugin-dir "$build/lib/trainyard/backends" \
    --dtype bf16 --concurrency 1,8,32 --prompt-len 32 --new-tokens 32 --chunk 64 || rc=1
  return $rc
}

phase_deterministic() {
  local rc=0 t=$build/tests/cuda_emu_deterministic_test
  echo "== (a) matmul and attention rows on the card, deterministic=1"
  if [[ -x $t ]]; then
    TY_DET_DEVICE=1 TY_DET_PLUGIN_DIR=$build/lib/trainyard/backends timeout 240 "$t" \
      >"$out/deterministic-rows.log" 2>&1 || rc=1
    grep -E "rows differ|attention:|OK|FAIL|PASSED|ERROR" "$out/deterministic-rows.log" | head -90
  else
    echo "missing $t (scripts/build-device.sh builds it; carry build-device/tests/$(basename "$t"))"
    rc=1
  fi
  echo "== (b) serve --deterministic: 256 requests alone and concurrent; the default beside it"
  timeout 330 python3 tests/cuda/deterministic_serve.py --trainyard "$ty" --backend cuda:0 \
    --dtype bf16 --requests 256 --new-tokens 16 --modes det,default \
    --json-out "$out/deterministic-serve.json" || rc=1
  echo "== (c) train tok/s with and without --deterministic (gpt2-124m random, bf16-mixed)"
  python3 - /tmp/ty-det-ids.jsonl <<'PY'
import json, random, sys
r = random.Random(34)
with open(sys.argv[1], "w") as f:
    for _ in range(200):
        f.write(json.dumps([r.randrange(50256) for _ in range(300)]) + "\n")
PY
  "$ty" data prepare --format ids --vocab-size 50257 --eos-id 50256 \
    --input /tmp/ty-det-ids.jsonl --seq-len 256 --val-fraction 0.05 --out /tmp/ty-det-ids \
    >/dev/null || rc=1
  local mode tps_det="" tps_def=""
  for mode in det default; do
    local flag=() line
    [[ $mode == det ]] && flag=(--deterministic)
    rm -rf "/tmp/ty-det-train-$mode"
    line=$(timeout 150 "$ty" train --preset gpt2-124m --data /tmp/ty-det-ids \
      --out "/tmp/ty-det-train-$mode" --backend cuda:0 --dtype bf16-mixed --batch-size 8 \
      --max-steps 20 "${flag[@]}" 2>&1 | tee "$out/deterministic-train-$mode.log" |
      grep "steps, final loss" | tail -1)
    echo "$mode: ${line:-train failed (see deterministic-train-$mode.log)}"
    [[ -z $line ]] && { rc=1; tail -5 "$out/deterministic-train-$mode.log"; }
    local tps
    tps=$(grep -o '[0-9.]* tok/s' <<<"$line" | grep -o '^[0-9.]*')
    [[ $mode == det ]] && tps_det=$tps || tps_def=$tps
  done
  if [[ -n $tps_det && -n $tps_def ]]; then
    python3 -c "import sys; d, b = map(float, sys.argv[1:]); print(f'train: --deterministic {d:.0f} tok/s, default {b:.0f} tok/s: {d / b:.2f}x (whole run, first step compile included)')" \
      "$tps_det" "$tps_def"
  fi
  return $rc
}

# A time limit for one piece of phase_memory: seconds times MEMORY_TIME.
mem_timeout() {
  python3 -c "import sys; print(int(float(sys.argv[1]) * float(sys.argv[2])))" "$1" \
    "${MEMORY_TIME:-1}"
}

# Real text for the 7B run: the repository's docs and C sources (a few MB),
# a byte-level BPE trained on them (as large as the text allows: ~14K), and
# the text tokenized into an ids dataset of the 7B shape's vocabulary, 32000
# (ids above the tokenizer's never occur: the LM head is still 32000 wide).
memory_text_data() {
  local dir=$1
  mkdir -p "$dir"
  cat docs/*.md README.md $(git ls-files '*.c' '*.h' 2>/dev/null || find . -name '*.[ch]') \
    >"$dir/text.txt" 2>/dev/null
  "$ty" data train-tokenizer --input "$dir/text.txt" --vocab-size 32000 --format text \
    --out "$dir/tokenizer.json" --force || return 1
  python3 - "$ty" "$dir" <<'PY' || return 1
import json, subprocess, sys
ty, d = sys.argv[1], sys.argv[2]
text = open(d + "/text.txt", "rb").read()
piece = len(text) // 64 + 1
with open(d + "/ids.jsonl", "w") as f:
    for i in range(0, len(text), piece):
        r = subprocess.run([ty, "tokenize", "--tokenizer", d + "/tokenizer.json", "--json",
                            "--no-special"], input=text[i:i + piece], capture_output=True,
                           check=True)
        f.write(json.dumps({"ids": json.loads(r.stdout)["ids"]}) + "\n")
vocab = json.load(open(d + "/tokenizer.json"))["model"]["vocab"]
print(vocab["<|endoftext|>"], file=open(d + "/eos", "w"))
PY
  "$ty" data prepare --format ids --vocab-size 32000 --eos-id "$(cat "$dir/eos")" \
    --input "$dir/ids.jsonl" --seq-len 2048 --out "$dir/data-2048"
}

phase_memory() {
  local m=$out/memory rc=0
  mkdir -p "$m"
  # Adafactor at lr 1e-2 (its relative step's ceiling; with scale_parameter a
  # step of 1e-2 rms(p)): at 3e-4 a random-init model's loss barely moves in
  # 20 steps (llama-60m on the same text on cpu: 10.53 -> 10.49; at 1e-2 -> 8.5).
  local levers=(--recompute layer --optimizer adafactor --fused-optimizer --dtype bf16)
  local parts=" ${MEMORY_PARTS:-a e b c d f} "
  [[ $parts == *" a "* ]] && echo "== (a) conformance of the levers' ops on cuda:0 (f32, bf16, f16)"
  [[ $parts == *" a "* ]] && for ops in 'linear_cross_entropy*' adafactor_update global_norm_scale; do
    timeout "$(mem_timeout 60)" "$ty" conform --backend cuda:0 --ops "$ops" --summary \
      >"$m/conform-${ops%\*}.log" 2>&1 || rc=1
    tail -2 "$m/conform-${ops%\*}.log"
  done
  if [[ $parts == *" e "* ]]; then
  echo "== (e) the tiny fixtures with each lever, cuda:0 against cpu"
  timeout "$(mem_timeout 180)" python3 tests/cuda/levers_vs_cpu.py --trainyard "$ty" \
    --models "$models" --data /tmp/ty-ids >"$m/levers_vs_cpu.log" 2>&1 || rc=1
  cat "$m/levers_vs_cpu.log"
  fi
  if [[ $parts == *" b "* ]]; then
  echo "== (b) llama-7b, T=2048, B=1, real text, memory_limit=24GiB, 20 steps"
  if memory_text_data /tmp/ty-text >"$m/text-data.log" 2>&1; then
    BUILD=$build BACKEND='cuda:0?memory_limit=24GiB' MEMORY_LIMIT=24GiB STEPS=20 \
      DATA=/tmp/ty-text/data-2048 WORK=/tmp/ty-mem-7b \
      timeout "$(mem_timeout 240)" bench/memory_bench.sh llama-7b 2048 "${levers[@]}" \
      --loss-chunk 1024 -- --lr 1e-2 >"$m/llama-7b-2048.log" 2>&1 || rc=1
    tail -8 "$m/llama-7b-2048.log"
  else
    echo "making the text dataset failed:"; tail -5 "$m/text-data.log"; rc=1
  fi
  fi
  [[ $parts == *" c "* ]] && echo "== (c) llama-1b at 32K, 64K, 128K tokens (3 steps each; --clip 0: one backward)"
  local seq limit
  [[ $parts == *" c "* ]] && for seq in 32768 65536 131072; do
    limit=$(mem_timeout $((seq / 1024 + 30)))
    BUILD=$build MEMORY_LIMIT= STEPS=3 WORK=/tmp/ty-mem-1b \
      timeout "$limit" bench/memory_bench.sh llama-1b $seq "${levers[@]}" --loss-chunk 4096 \
      -- --clip 0 --lr 1e-2 >"$m/llama-1b-$seq.log" 2>&1
    local r=$?
    tail -6 "$m/llama-1b-$seq.log"
    if ((r != 0)); then
      echo "llama-1b T=$seq: exit $r (124: over its ${limit} s) -- the longest that fits is below"
      break
    fi
  done
  if [[ $parts == *" f "* ]]; then
    echo "== (f) llama-1b at 256K tokens (--max-positions 262144, 2 steps, the MLP in 8K pieces)"
    BUILD=$build MEMORY_LIMIT= STEPS=2 WORK=/tmp/ty-mem-1b-256k \
      timeout "$(mem_timeout 600)" bench/memory_bench.sh llama-1b 262144 "${levers[@]}" \
      --loss-chunk 4096 --mlp-chunk 8192 --max-positions 262144 -- --clip 0 --lr 1e-2 \
      >"$m/llama-1b-262144.log" 2>&1 || rc=1
    tail -6 "$m/llama-1b-262144.log"
  fi
  [[ $parts == *" d "* ]] && echo "== (d) PyTorch llama-1b: transformers + SDPA + gradient checkpointing, bf16, Adafactor"
  [[ $parts == *" d "* ]] && for seq in 32768 65536 131072; do
    timeout "$(mem_timeout 80)" python3 bench/pytorch_cuda_train.py --model llama-1b --batch 1 \
      --seq $seq --steps 2 --warmup 1 --dtype bf16 --optimizer adafactor --checkpointing \
      >"$m/pytorch-1b-$seq.log" 2>&1
    local r=$?
    grep -E "RESULT|OutOfMemory|Error" "$m/pytorch-1b-$seq.log" | tail -2
    if ((r != 0)); then
      echo "pytorch llama-1b T=$seq: exit $r -- the longest that fits is below"
      break
    fi
  done
  return $rc
}

phase_numerics() {
  local rc=0 m
  rm -rf /tmp/ty-overflow /tmp/ty-num-train /tmp/ty-num-plain /tmp/ty-num-checked
  for m in gpt2 llama; do
    echo "== compare --per-layer cpu,cuda:0 ($m, f32)"
    "$ty" compare --backends cpu,cuda:0 --per-layer --model $models/$m --data /tmp/ty-ids \
      --batch-size 4 || rc=1
  done
  echo "== cross-device resume cpu 1-4 -> cuda 5-8 -> cpu 9-12 against cpu 1-12"
  TRAINYARD_TEST_RESUME_LEGS="cpu=4,cuda=8,cpu=12" python3 tests/apps/test_cross_device_resume_cli.py \
    --trainyard "$ty" --models "$models" 2>&1 | tail -12
  ((PIPESTATUS[0] != 0)) && rc=1
  echo "== --check-numerics on cuda:0 (layer 1's MLP weight x1e38)"
  python3 - "$models" /tmp/ty-overflow <<'PY'
import sys, types
sys.path.insert(0, "tests/apps")
import cli_util
cli_util.CFG = types.SimpleNamespace(models=sys.argv[1])
import test_numerics_cli as t
t.scaled_model(sys.argv[2], "gpt2", t.GPT2_FC1, 1e38)
PY
  echo "[[1, 2, 3, 4, 5, 6, 7, 8]]" > /tmp/ty-tokens.json
  "$ty" forward --model /tmp/ty-overflow --backend cuda:0 --check-numerics --tokens /tmp/ty-tokens.json \
    --out /tmp/ty-forward.safetensors 2>&1 | tail -12
  [[ ${PIPESTATUS[0]} == 1 ]] || { echo "forward --check-numerics: expected exit 1"; rc=1; }
  "$ty" train --model /tmp/ty-overflow --data /tmp/ty-ids --out /tmp/ty-num-train --backend cuda:0 \
    --batch-size 4 --max-steps 3 --check-numerics 2>&1 | tail -12
  [[ ${PIPESTATUS[0]} == 1 ]] || { echo "train --check-numerics: expected exit 1"; rc=1; }
  echo "== a clean run: every:2 against no check (losses bit for bit)"
  "$ty" train --model $models/gpt2 --data /tmp/ty-ids --out /tmp/ty-num-plain --backend cuda:0 \
    --batch-size 4 --max-steps 6 --schedule constant >/dev/null 2>&1 || rc=1
  "$ty" train --model $models/gpt2 --data /tmp/ty-ids --out /tmp/ty-num-checked --backend cuda:0 \
    --batch-size 4 --max-steps 6 --schedule constant --check-numerics=every:2 2>&1 | grep -i "numerics" | head -5
  # cuda fuses ops and runs some in place; a checked step keeps every
  # intermediate, so it may round differently from a plain one: print both
  # curves and their largest relative difference (cpu runs node by node and
  # gives the same bits: test_numerics_cli.py SampledTest)
  python3 - /tmp/ty-num-plain/metrics.jsonl /tmp/ty-num-checked/metrics.jsonl <<'PY'
import json, sys
rows = [{r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r} for p in sys.argv[1:]]
for s in sorted(rows[0]):
    print("step %d: plain %.9g checked %.9g" % (s, rows[0][s], rows[1][s]))
print("largest relative difference: %.3e" % max(abs(rows[0][s] - rows[1][s]) / abs(rows[0][s]) for s in rows[0]))
PY
  return $rc
}

phase_multihost() {
  local gpus rc=0 suite
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  echo "GPUs: $gpus"
  # no iproute2 on the GPU machines: scripts/build-device.sh carries Debian's
  if ! command -v ip >/dev/null && [[ -x $build/lib/deps/iproute2/ip ]]; then
    export PATH=$(readlink -f "$build/lib/deps/iproute2"):$PATH
  fi
  grep -E '^Cap(Eff|Bnd)' /proc/self/status
  ip netns add ty-probe-$$ && ip netns del ty-probe-$$ && echo "network namespaces: allowed"
  for suite in EnvMatchTest MpirunMatchTest; do
    echo "== $suite on cuda across two namespace hosts"
    TRAINYARD_MULTIHOST_BACKEND=cuda TRAINYARD_MULTIHOST_GPUS=$gpus NCCL_SOCKET_IFNAME=eth0 \
      NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
      timeout 500 python3 tests/multihost/test_multihost_cli.py --trainyard "$ty" --models "$models" \
      --mpi-shim "$build/lib/trainyard/libty_mpi.so" "$suite" >"$out/multihost-$suite.log" 2>&1
    local code=$?
    ((code != 0 && code != 77)) && rc=1
    grep -E "\.\.\. |^Ran |^OK|^FAILED|SKIPPED" "$out/multihost-$suite.log" | head -20
  done
  echo "== which NCCL transport joins the hosts (2 ranks, 3 steps, NCCL_DEBUG=INFO)"
  TRAINYARD_MULTIHOST_GPUS=$gpus python3 - "$ty" "$models" >"$out/multihost-nccl.log" 2>&1 <<'PY'
import os, subprocess, sys
sys.path[:0] = ["tests/multihost", "tests/common", "tests/apps"]
import env_launch, netns_hosts, test_multihost_cli as mh
ty, models = sys.argv[1:]
with netns_hosts.Hosts(2) as hosts:
    procs = []
    for rank, host in enumerate(["h1", "h2"]):
        env = env_launch.rank_env(rank, 2, hosts.address("h1"), 29500, local_rank=0, extra={
            "NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "INFO",
            "NCCL_DEBUG_SUBSYS": "INIT,NET"})
        argv = [ty, "train", "--model", models + "/gpt2", "--data", "/tmp/ty-ids", "--backend",
                "cuda", "--batch-size", "2", "--max-steps", "3", "--out", "/tmp/ty-mh-nccl",
                "--overwrite"]
        procs.append(hosts.popen(host, ["sh", "-c", mh.host_prelude() + 'exec "$@"', "sh"] + argv,
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True))
    for rank, p in enumerate(procs):
        text = p.communicate(timeout=300)[0]
        print("---- rank %d: exit %d" % (rank, p.returncode))
        print(text)
PY
  grep -E "^---- rank|via NET|via P2P|via SHM|Using network|NET/Socket : Using|data parallel|step +3|loss" \
    "$out/multihost-nccl.log" | head -30
  return $rc
}

phase_crossdev() {
  local rc=0
  echo "== the cpu GEMM's streaming path against its packed path on every ISA this host has"
  if [[ -x $build/tests/cpu_gemm_stream_test ]]; then
    "$build/tests/cpu_gemm_stream_test" 2>&1 | tail -8
    ((PIPESTATUS[0] != 0)) && rc=1
  else
    echo "missing $build/tests/cpu_gemm_stream_test (carry build-device/tests/cpu_gemm_stream_test)"
  fi
  echo "== cross-device resume cuda 1-4 -> cpu 5-8 -> cuda 9-12 against cpu 1-12"
  TRAINYARD_TEST_RESUME_LEGS="cuda=4,cpu=8,cuda=12" python3 tests/apps/test_cross_device_resume_cli.py \
    --trainyard "$ty" --models "$models" 2>&1 | tail -12
  ((PIPESTATUS[0] != 0)) && rc=1
  echo "== 50 steps of train --deterministic --dtype f32 on cpu and on cuda:0 (GPT-2, Llama fixtures)"
  local m b
  for m in gpt2 llama; do
    for b in cpu cuda:0; do
      rm -rf "/tmp/ty-xd-$m-${b%%:*}"
      "$ty" train --model $models/$m --data /tmp/ty-ids --out "/tmp/ty-xd-$m-${b%%:*}" --backend "$b" \
        --dtype f32 --batch-size 4 --max-steps 50 --deterministic >"$out/crossdev-$m-${b%%:*}.log" 2>&1 ||
        { echo "$m on $b failed:"; tail -5 "$out/crossdev-$m-${b%%:*}.log"; rc=1; }
    done
    python3 - "$m" /tmp/ty-xd-$m-cpu/metrics.jsonl /tmp/ty-xd-$m-cuda/metrics.jsonl <<'PY' || rc=1
import json, sys
m, a, b = sys.argv[1:]
rows = [{r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r} for p in (a, b)]
steps = sorted(rows[0])
assert steps == sorted(rows[1]) and len(steps) == 50, (len(steps), len(rows[1]))
worst = max(abs(rows[0][s] - rows[1][s]) for s in steps)
print("%s: 50 steps, cpu vs cuda step losses: largest |difference| %.3e (step 1 %.9g / %.9g, step 50 %.9g / %.9g)"
      % (m, worst, rows[0][1], rows[1][1], rows[0][50], rows[1][50]))
sys.exit(0 if worst <= 1e-6 else 1)
PY
  done
  return $rc
}

status=0
prepare_ids
for p in "$@"; do
  echo "######## $p ($(date +%T))"
  start=$SECONDS
  "phase_$p" >"$out/$p.log" 2>&1
  rc=$?
  ((rc != 0)) && status=1
  echo "######## $p: exit $rc in $((SECONDS - start)) s"
  tail -40 "$out/$p.log"
done
exit $status
