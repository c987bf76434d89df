#!/usr/bin/env bash
# `trainyard generate` end to end on the emulated cuda (tests/cuda/emu): the
# paged engine's whole step graph (the executor's fusions among it: q/k/v
# SLICES, the norms, the matmul epilogues) on cuda:0 against the same
# prompts on cpu, and with TRAINYARD_CUDA_FUSE=0 (and with the GEMV kernels
# and programmatic dependent launches off, and with the kernels for every
# few-row matmul) against itself as it runs by default.
# Greedy ids must be equal: the fusions are exact copies or the same
# arithmetic, and these small f32/bf16 fixtures decode the same on both
# backends. Prompts of 1..50 ids for GPT-2 (64 positions), 1..110 for the
# others (two paged-attention splits past 64 keys), longer than the 32-token
# prefill chunk, in batches of 4, so steps mix prefill chunks and decode rows.
#
#   generate_emu_test.sh TRAINYARD FIXTURE_MODELS_DIR
# (TRAINYARD_CUDA_DRIVER / TRAINYARD_CUDA_BLASLT name the emulator.)
set -euo pipefail
ty=${1:?usage: generate_emu_test.sh TRAINYARD FIXTURE_MODELS_DIR}
models=${2:?usage: generate_emu_test.sh TRAINYARD FIXTURE_MODELS_DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# short: GPT-2's 64 positions; long: rows past 64 keys, so paged attention
# cuts them into two splits and merges them (the plugin's split counts).
python3 - "$work" <<'PY'
import json, os, random, sys
for name, most, fixed in (("short", 45, [1, 50, 32, 33]), ("long", 110, [1, 100, 64, 65])):
    rnd = random.Random(29)
    with open(os.path.join(sys.argv[1], name + ".jsonl"), "w") as f:
        for k in range(7):
            n = fixed[k] if k < 4 else rnd.randint(2, most)
            f.write(json.dumps({"id": str(k), "prompt_ids": [rnd.randrange(90) for _ in range(n)],
                                "max_new_tokens": 6 + k}) + "\n")
PY
rc=0
for m in gpt2 gpt2_bf16 llama3 mistral; do
  prompts=long ctx=128
  [[ $m == gpt2* ]] && prompts=short ctx=64
  run() { # backend output [env...]
    local backend=$1 out=$2
    shift 2
    env "$@" "$ty" generate --model "$models/$m" --backend "$backend" --input "$work/$prompts.jsonl" \
      --output "$out" --max-batch 4 --ctx $ctx --prefill-chunk 32 >"$out.log" 2>&1 ||
      { echo "$m on $backend $*: generate failed"; cat "$out.log"; return 1; }
  }
  run cpu "$work/$m-cpu.jsonl" || { rc=1; continue; }
  run cuda:0 "$work/$m-cuda.jsonl" || { rc=1; continue; }
  run cuda:0 "$work/$m-cuda-nofuse.jsonl" TRAINYARD_CUDA_FUSE=0 || { rc=1; continue; }
  # without the few-row GEMV kernels (cuBLASLt for every matmul: by
  # default the grouped q/k/v and gate/up products take them) and without
  # programmatic dependent launches (on by default); and with the kernels
  # for every few-row matmul
  run cuda:0 "$work/$m-cuda-blaslt.jsonl" TRAINYARD_CUDA_GEMV=0 TRAINYARD_CUDA_PDL=0 ||
    { rc=1; continue; }
  run cuda:0 "$work/$m-cuda-gemv.jsonl" TRAINYARD_CUDA_GEMV=all || { rc=1; continue; }
  for other in cuda-nofuse cuda-blaslt cuda-gemv cpu; do
    if cmp -s <(python3 -c 'import json,sys; [print(json.loads(l)["ids"]) for l in open(sys.argv[1])]' "$work/$m-cuda.jsonl") \
              <(python3 -c 'import json,sys; [print(json.loads(l)["ids"]) for l in open(sys.argv[1])]' "$work/$m-$other.jsonl"); then
      echo "$m: cuda:0 = $other"
    else
      echo "$m: cuda:0 and $other differ:"
      diff "$work/$m-cuda.jsonl" "$work/$m-$other.jsonl" | head -8
      rc=1
    fi
  done
done
exit $rc
