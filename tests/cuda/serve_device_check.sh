#!/usr/bin/env bash
# Issue 29 on a GPU machine, in one call of the device tool: the serving ops'
# conformance on cuda:0, the paged engine's batched = alone check on cuda:0
# (64 prompts of 1..1000 tokens through `trainyard generate --input`, greedy
# and seeded, in deterministic mode bit for bit and by default token for
# token), and bench/serve_bench.py's one-run table with its peers.
#
#   tests/cuda/serve_device_check.sh BUILD [PHASES...]
#
# Phases: conform equal spec profile ncu ncu-detail ab bench-gpt2 bench-llama (default:
# all but ncu, ncu-detail and ab; spec after equal). BACKEND and
# EQUAL_SHAPE (a serve_bench.py --random shape) let `equal` run elsewhere,
# e.g. BACKEND=cpu EQUAL_SHAPE=tiny-gpt2 for a smoke run. BUILD is a
# build-device tree (scripts/build-device.sh). Logs and JSON under $OUT (or
# /tmp/serve-device). Knobs: CONCURRENCY (default 1,8,32,64,256), PEERS
# (default hf-static,hf), LLAMA_CONCURRENCY (default 1,64),
# LLAMACPP_DIR (for PEERS=...,llamacpp: a folder of bench/llamacpp_build.sh),
# BENCH_TIMEOUT (seconds per bench phase, default 560), EQUAL_DET_ONLY=1
# (equal: the deterministic runs only, the ones it checks).
set -uo pipefail
build=${1:?usage: serve_device_check.sh BUILD [PHASES...]}
shift
phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(conform equal spec profile bench-gpt2 bench-llama)
out=${OUT:-/tmp/serve-device}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/../.." && pwd)
ty="$here/$build/bin/trainyard"
export LD_LIBRARY_PATH="$here/$build/lib/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TRAINYARD_CUDA_DRIVER=${TRAINYARD_CUDA_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
rc=0

phase_conform() {
  echo "== conform: the serving ops and attention (its dlse input) on cuda:0"
  for ops in 'paged_*' sample top_logprobs 'attention*'; do
    timeout 300 "$ty" conform --backend cuda:0 --tier all --ops "$ops" --summary || rc=1
  done
}

# Writes /tmp/serve-bench-SHAPE/SHAPE-bf16 (random weights) unless it exists.
random_model() {
  python3 - "$here" "$1" <<'PY'
import argparse, os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "bench"))
import serve_bench
tok = os.path.join(sys.argv[1], "tests", "fixtures", "tokenizers", "gpt2", "tokenizer.json")
shape = sys.argv[2]
serve_bench.random_model(argparse.Namespace(random=shape, dtype="bf16", tokenizer=tok,
                                            work="/tmp/serve-bench-" + shape))
PY
}

# 64 prompts of 1..1000 ids (every fourth shares a 300-id system prefix),
# 1..24 new tokens each; greedy, then seeded sampling.
make_prompts() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, os, random, sys
path, sampled = sys.argv[1], sys.argv[2] == "1"
rnd = random.Random(29)
vocab = int(sys.argv[3])
shared = [rnd.randrange(vocab) for _ in range(300)]
with open(path, "w") as f:
    for k in range(64):
        most = int(os.environ.get("MAX_PROMPT", "1000"))
        n = 1 if k == 0 else most if k == 1 else rnd.randint(1, most)
        ids = [rnd.randrange(vocab) for _ in range(n)]
        if k % 4 == 2:
            ids = (shared + ids)[:most]
        line = {"id": str(k), "prompt_ids": ids, "max_new_tokens": rnd.randint(1, 24)}
        if sampled:
            line.update(temperature=0.8, top_k=40 if k % 3 else 0, top_p=0.9 if k % 2 else 1.0,
                        seed=1000 + k)
        f.write(json.dumps(line) + "\n")
PY
}

phase_equal() {
  echo "== equal: 64 requests together = each alone (generate --input, cuda:0, gpt2-124m bf16)"
  local shape=${EQUAL_SHAPE:-gpt2-124m} backend=${BACKEND:-cuda:0}
  local model=/tmp/serve-bench-$shape/$shape-bf16
  random_model "$shape" || { rc=1; return; }
  for sampled in 0 1; do
    make_prompts "$out/prompts-$sampled.jsonl" "$sampled" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$model/config.json")"
    local modes=("--deterministic" "")
    [ -n "${EQUAL_DET_ONLY:-}" ] && modes=("--deterministic")
    for det in "${modes[@]}"; do
      local tag="s$sampled${det:+-det}"
      timeout 240 "$ty" generate --model "$model" --backend "$backend" --dtype bf16 $det \
        --input "$out/prompts-$sampled.jsonl" --output "$out/together-$tag.jsonl" \
        --max-batch 64 --ctx $((${MAX_PROMPT:-1000} + 24)) --prefill-chunk 256 >"$out/together-$tag.log" 2>&1 || rc=1
      timeout 240 "$ty" generate --model "$model" --backend "$backend" --dtype bf16 $det \
        --input "$out/prompts-$sampled.jsonl" --output "$out/alone-$tag.jsonl" \
        --max-batch 1 --ctx $((${MAX_PROMPT:-1000} + 24)) --prefill-chunk 256 >"$out/alone-$tag.log" 2>&1 || rc=1
      python3 - "$out/alone-$tag.jsonl" "$out/together-$tag.jsonl" "$tag" <<'PY' || rc=1
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 64, (len(a), len(b))
diff = [(x["id"], x["ids"], y["ids"]) for x, y in zip(a, b) if x["ids"] != y["ids"]]
tokens = sum(len(x["ids"]) for x in a)
print("%s: %d of 64 requests differ (%d tokens in all)" % (sys.argv[3], len(diff), tokens))
for d in diff[:3]:
    print("  request %s alone %s together %s" % d)
if "det" in sys.argv[3] and diff:
    sys.exit(1)
PY
    done
  done
}

# Speculative decoding (--speculate 4) on the same 64 prompts: with
# --deterministic every request equals its alone run of phase `equal`
# (which must run first); by default the count that differs is printed.
# Then the table of that shape at 1 and 8 streams with and without drafts.
phase_spec() {
  echo "== spec: --speculate 4 (prompt lookup) = without, then its speed"
  local shape=${EQUAL_SHAPE:-gpt2-124m} backend=${BACKEND:-cuda:0}
  local model=/tmp/serve-bench-$shape/$shape-bf16
  for sampled in 0 1; do
    for det in "--deterministic" ""; do
      local tag="s$sampled${det:+-det}"
      [ -f "$out/alone-$tag.jsonl" ] || { echo "no $out/alone-$tag.jsonl: run phase equal first"; rc=1; return; }
      timeout 240 "$ty" generate --model "$model" --backend "$backend" --dtype bf16 $det \
        --speculate 4 --input "$out/prompts-$sampled.jsonl" --output "$out/spec-$tag.jsonl" \
        --max-batch 64 --ctx $((${MAX_PROMPT:-1000} + 24)) --prefill-chunk 256 >"$out/spec-$tag.log" 2>&1 || rc=1
      grep -h "speculative decoding" "$out/spec-$tag.log"
      python3 - "$out/alone-$tag.jsonl" "$out/spec-$tag.jsonl" "spec-$tag" <<'PY' || rc=1
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
diff = [x["id"] for x, y in zip(a, b) if x["ids"] != y["ids"]]
print("%s: %d of %d requests differ from alone without drafts" % (sys.argv[3], len(diff), len(a)))
if "det" in sys.argv[3] and (diff or len(a) != len(b)):
    sys.exit(1)
PY
    done
  done
  for spec in 0 4; do
    timeout 280 python3 "$here/bench/serve_bench.py" --trainyard "$ty" --backend "$backend" \
      --random "$shape" --dtype bf16 --work "/tmp/serve-bench-$shape" \
      --concurrency 1,8 --serve-args "--speculate $spec" \
      --json "$out/serve-$shape-spec$spec.json" || rc=1
  done
}

# Where a decode step's time goes: `generate --input` of N streams of 128
# random prompt ids + 128 new tokens (tok/s from generate's summary line, the
# step graphs captured; with and without queued host writes), then the same with TRAINYARD_PROFILE=1 (uncaptured,
# every node timed) and 32 new tokens; for each shape of PROFILE_SHAPES
# (default gpt2-124m,llama-3.2-1b) and N of PROFILE_STREAMS (default 1,64).
# N prompts of 128 random ids (the vocabulary of CONFIG), seeded: FILE N CONFIG
stream_prompts() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, random, sys
vocab = json.load(open(sys.argv[3]))["vocab_size"]
rnd = random.Random(7)
with open(sys.argv[1], "w") as f:
    for k in range(int(sys.argv[2])):
        f.write(json.dumps({"id": str(k),
                            "prompt_ids": [rnd.randrange(vocab) for _ in range(128)]}) + "\n")
PY
}

phase_profile() {
  local backend=${BACKEND:-cuda:0} shape n
  for shape in ${PROFILE_SHAPES:-gpt2-124m llama-3.2-1b}; do
    random_model "$shape" || { rc=1; continue; }
    local model=/tmp/serve-bench-$shape/$shape-bf16
    for n in ${PROFILE_STREAMS:-1 64}; do
      stream_prompts "$out/profile-$shape-$n.jsonl" "$n" "$model/config.json"
      for queued in 1 0; do
        echo "-- $shape, $n streams, captured, TRAINYARD_CUDA_QUEUED_WRITES=$queued"
        timeout 120 env TRAINYARD_CUDA_QUEUED_WRITES=$queued "$ty" generate --model "$model" \
          --backend "$backend" --dtype bf16 --input "$out/profile-$shape-$n.jsonl" \
          --output /dev/null --max-batch "$n" --ctx 256 --prefill-chunk 128 \
          --max-new-tokens 128 2>&1 | grep "trainyard generate:" || rc=1
      done
      echo "-- $shape, $n streams, TRAINYARD_PROFILE=1, 32 new tokens"
      timeout 120 env TRAINYARD_PROFILE=1 "$ty" generate --model "$model" --backend "$backend" \
        --dtype bf16 --input "$out/profile-$shape-$n.jsonl" --output /dev/null \
        --max-batch "$n" --ctx 256 --prefill-chunk 128 --max-new-tokens 32 \
        >"$out/profile-$shape-$n.log" 2>&1 || rc=1
      grep "trainyard generate:" "$out/profile-$shape-$n.log"
    done
  done
}

# Nsight Compute's command line: on PATH, else the newest under /opt/nvidia.
find_ncu() {
  local n
  n=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
  [ -x "$n" ] && echo "$n"
}

# Nsight Compute's serialized kernel times of steady decode steps (the graph's
# nodes one by one): bench/ncu_summary.py sums them per kernel and per step.
# NCU_SKIP / NCU_COUNT pick the window of kernel launches; NCU_FLAGS (default
# --clock-control none) e.g. "--cache-control none --clock-control base".
phase_ncu() {
  local backend=${BACKEND:-cuda:0} shape n ncu
  ncu=$(find_ncu) || { echo "ncu: not found"; rc=1; return; }
  for shape in ${PROFILE_SHAPES:-gpt2-124m}; do
    random_model "$shape" || { rc=1; continue; }
    local model=/tmp/serve-bench-$shape/$shape-bf16
    for n in ${PROFILE_STREAMS:-1 64}; do
      stream_prompts "$out/ncu-$shape-$n.jsonl" "$n" "$model/config.json"
      echo "-- ncu: $shape, $n streams"
      timeout 240 "$ncu" --csv ${NCU_FLAGS:---clock-control none} --metrics gpu__time_duration.sum \
        --launch-skip "${NCU_SKIP:-$((4000 + 200 * n))}" --launch-count "${NCU_COUNT:-1200}" \
        "$ty" generate --model "$model" --backend "$backend" --dtype bf16 \
        --input "$out/ncu-$shape-$n.jsonl" --output /dev/null --max-batch "$n" --ctx 256 \
        --prefill-chunk 128 --max-new-tokens 128 >"$out/ncu-$shape-$n.csv" 2>"$out/ncu-$shape-$n.err" || rc=1
      tail -3 "$out/ncu-$shape-$n.err"
      python3 "$here/bench/ncu_summary.py" "$out/ncu-$shape-$n.csv" --top 45 || rc=1
    done
  done
}

# One kernel's full Nsight Compute report (its sections: throughput,
# occupancy, warp states, memory) in a steady decode step: NCU_KERNEL (a
# -k filter, default regex:ty_paged_attn: any head size's paged kernel),
# NCU_KERNEL_SKIP launches of it
# skipped first (default 1200 + 8 * streams: past the prompts of 128 + 128
# generation), one profiled; the per-instruction stall reasons of at least
# 0.05 cycles are printed.
phase_ncu_detail() {
  local backend=${BACKEND:-cuda:0} shape n ncu k=${NCU_KERNEL:-regex:ty_paged_attn}
  ncu=$(find_ncu) || { echo "ncu: not found"; rc=1; return; }
  for shape in ${PROFILE_SHAPES:-gpt2-124m}; do
    random_model "$shape" || { rc=1; continue; }
    local model=/tmp/serve-bench-$shape/$shape-bf16
    for n in ${PROFILE_STREAMS:-1 64}; do
      stream_prompts "$out/ncu-detail-$shape-$n.jsonl" "$n" "$model/config.json"
      echo "-- ncu detail: $k, $shape, $n streams"
      timeout 240 "$ncu" --set full --metrics \
        'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' -k "$k" \
        --launch-skip "${NCU_KERNEL_SKIP:-$((1200 + 8 * n))}" \
        --launch-count 1 "$ty" generate --model "$model" --backend "$backend" --dtype bf16 \
        --input "$out/ncu-detail-$shape-$n.jsonl" --output /dev/null --max-batch "$n" \
        --ctx 256 --prefill-chunk 128 --max-new-tokens 128 >"$out/ncu-detail-$shape-$n.txt" \
        2>&1 || rc=1
      grep -vE "^==PROF==|trainyard generate" "$out/ncu-detail-$shape-$n.txt" | \
        grep -E "Grid Size|Duration|Throughput|Occupancy|Registers|Shared Memory|Block Limit|Warp Cycles|Issued|Eligible|Active Warps|One or More|No Eligible|Waves|L2 Hit|stalled" | \
        awk '!/stalled/ || $NF+0 >= 0.05' | head -80
    done
  done
}

# Two builds on the same generate runs, alternately (OLD=an older build
# folder beside BUILD): 128 + 128 tokens per stream, captured graphs,
# AB_ROUNDS rounds (default 3) of each build per stream count; with
# AB_NEW_ENV (VAR=value ...) the new build also runs with that environment.
phase_ab() {
  local old=${OLD:?phase ab needs OLD=an older build folder} backend=${BACKEND:-cuda:0} shape n r b
  for shape in ${PROFILE_SHAPES:-gpt2-124m}; do
    random_model "$shape" || { rc=1; continue; }
    local model=/tmp/serve-bench-$shape/$shape-bf16
    for n in ${PROFILE_STREAMS:-1 64}; do
      stream_prompts "$out/ab-$shape-$n.jsonl" "$n" "$model/config.json"
      for r in $(seq "${AB_ROUNDS:-3}"); do
        for v in old new ${AB_NEW_ENV:+new+env}; do
          b=$build
          [ "$v" = old ] && b=$old
          printf '%s, %s streams, round %s, %s%s: ' "$shape" "$n" "$r" "$b" \
            "$([ "$v" = new+env ] && echo " with $AB_NEW_ENV")"
          timeout 120 env LD_LIBRARY_PATH="$here/$b/lib/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            $([ "$v" = new+env ] && echo "$AB_NEW_ENV") \
            "$here/$b/bin/trainyard" generate --model "$model" --backend "$backend" --dtype bf16 \
            --input "$out/ab-$shape-$n.jsonl" --output /dev/null --max-batch "$n" --ctx 256 \
            --prefill-chunk 128 --max-new-tokens 128 2>&1 | grep "trainyard generate:" || { echo failed; rc=1; }
        done
      done
    done
  done
}

phase_bench_gpt2() {
  echo "== bench: gpt2-124m bf16, prompt 128 + 128, peers ${PEERS:-hf-static,hf}"
  timeout "${BENCH_TIMEOUT:-560}" python3 "$here/bench/serve_bench.py" --trainyard "$ty" --backend cuda:0 \
    --random gpt2-124m --dtype bf16 --device cuda:0 --work /tmp/serve-bench-gpt2-124m \
    --concurrency "${CONCURRENCY:-1,8,32,64,256}" --peer "${PEERS:-hf-static,hf}" \
    ${LLAMACPP_DIR:+--llamacpp-dir "$LLAMACPP_DIR"} --json "$out/serve-gpt2-124m.json" || rc=1
}

phase_bench_llama() {
  echo "== bench: llama-3.2-1b bf16, prompt 128 + 128, peers ${PEERS:-hf-static,hf}"
  timeout "${BENCH_TIMEOUT:-560}" python3 "$here/bench/serve_bench.py" --trainyard "$ty" --backend cuda:0 \
    --random llama-3.2-1b --dtype bf16 --device cuda:0 --work /tmp/serve-bench-llama \
    --concurrency "${LLAMA_CONCURRENCY:-1,64}" --peer "${PEERS:-hf-static,hf}" \
    ${LLAMACPP_DIR:+--llamacpp-dir "$LLAMACPP_DIR"} --json "$out/serve-llama-3.2-1b.json" || rc=1
}

for p in "${phases[@]}"; do
  "phase_${p//-/_}" >"$out/$p.log" 2>&1
  cat "$out/$p.log"
done
exit $rc
