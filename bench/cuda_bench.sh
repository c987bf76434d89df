#!/usr/bin/env bash
# Trainyard's cuda backend against PyTorch on the same GPU, in one run: one
# training step (forward, backward, clip 1.0, AdamW) of the same model,
# batch, sequence and optimizer, bf16-mixed (PyTorch: bf16 autocast, fused
# AdamW, SDPA flash attention; eager and torch.compile), then one table
# (docs/performance.md records it with the card, driver and date).
#
#   bench/cuda_bench.sh BUILD_DIR [OUT_DIR]
#
# Environment: CONFIGS (default "gpt2-124m:16:1024 gpt2-124m:32:1024
# gpt2-350m:8:1024 llama-1b:4:2048", model:batch:seq), PEERS ("eager
# compile"; also eager-minimal and compile-minimal: the compact GPT-2 of
# pytorch_cuda_train.py --impl minimal, skipped for llama rows;
# compile-auto: compile-minimal on GPT-2 rows, compile on the others; a -cd
# suffix adds inductor's coordinate-descent tuning and a -pad suffix rounds
# the vocabulary up to a multiple of 64 as nanoGPT does (50257 -> 50304),
# e.g. compile-minimal-pad; llmc: llm.c's train_gpt2cu, built by
# bench/llmc_peer.sh in LLMC (default peers/llm.c); llmc-cudnn: the same
# built with cuDNN's flash attention (USE_CUDNN=1), llm.c's fastest; and
# llmc-py: llm.c's own PyTorch script train_gpt2.py with torch.compile,
# all GPT-2 124M rows only), STEPS (20 timed), WARMUP (5;
# torch.compile compiles in the warm-up), PEAK (the card's dense bf16
# TFLOP/s for MFU; default 989, the H100/H200 SXM datasheet figure), PYTHON
# (python3 with torch and transformers). The table ends each Trainyard row
# with its ratio to the fastest peer of the same model, B and T.
set -uo pipefail
build=${1:?usage: cuda_bench.sh BUILD_DIR [OUT_DIR]}
out=${2:-${OUT:-/tmp/ty-cuda-bench}}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
configs=${CONFIGS:-"gpt2-124m:16:1024 gpt2-124m:32:1024 gpt2-350m:8:1024 llama-1b:4:2048"}
peers=${PEERS:-"eager compile"}
steps=${STEPS:-20}
warmup=${WARMUP:-5}
peak=${PEAK:-989}
py=${PYTHON:-python3}
llmc=${LLMC:-peers/llm.c}
export TRAINYARD_BACKEND_PATH=${TRAINYARD_BACKEND_PATH:-$build/lib/trainyard/backends}
results="$out/results.txt"
: >"$results"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/card.txt" 2>&1
echo "card: $(cat "$out/card.txt"); date $(date -u +%FT%TZ)"

for cfg in $configs; do
  IFS=: read -r model batch seq <<<"$cfg"
  echo "== $model B=$batch T=$seq"
  log="$out/trainyard-$model-$batch-$seq.log"
  timeout 400 "$build/bin/train_bench" --backend cuda:0 --model "$model" --dtype bf16-mixed \
    --batch "$batch" --seq "$seq" --steps "$steps" --warmup "$warmup" --peak-tflops "$peak" \
    >"$log" 2>&1
  peak_mib=$(grep -o 'peak [0-9.]* MiB' "$log" | tail -1 | grep -o '[0-9.]*')
  line=$(grep '^RESULT' "$log" | tail -1)
  [[ -n $line ]] && echo "$line peak_mib=${peak_mib:-?}" | tee -a "$results" ||
    { echo "trainyard failed:"; tail -5 "$log"; }
  for peer in $peers; do
    if [[ $peer == llmc* ]]; then # bench/llmc_peer.sh: GPT-2 124M only
      [[ $model == gpt2-124m && $seq == 1024 ]] || continue
      case $peer in
        llmc) mode=run ;;
        llmc-cudnn) mode=run-cudnn ;;
        llmc-py) mode=run-py ;;
        *) echo "unknown peer $peer"; continue ;;
      esac
      STEPS=$((steps + 10)) "$here/llmc_peer.sh" $mode "$llmc" "$out/llmc" "$batch" \
        >"$out/$peer-$batch.txt" 2>&1
      line=$(grep '^RESULT' "$out/$peer-$batch.txt" | tail -1)
      [[ -n $line ]] && echo "$line" | tee -a "$results" ||
        { echo "$peer failed:"; tail -8 "$out/$peer-$batch.txt"; }
      continue
    fi
    if [[ $peer == compile-auto* ]]; then
      [[ $model == gpt2-* ]] && peer=compile-minimal${peer#compile-auto} ||
        peer=compile${peer#compile-auto}
    fi
    plog="$out/pytorch-$peer-$model-$batch-$seq.log"
    flag=""
    [[ $peer == compile* ]] && flag=--compile
    [[ $peer == *-cd || $peer == *-cd-* ]] && flag="$flag --cd-tuning"
    [[ $peer == *-pad ]] && flag="$flag --vocab-pad 64"
    if [[ $peer == *-minimal* ]]; then
      [[ $model == gpt2-* ]] || continue # a GPT-2 only
      flag="$flag --impl minimal"
    fi
    timeout 600 "$py" "$here/pytorch_cuda_train.py" --model "$model" --batch "$batch" \
      --seq "$seq" --steps "$steps" --warmup "$warmup" --dtype bf16-mixed --peak-tflops "$peak" \
      $flag >"$plog" 2>&1
    line=$(grep '^RESULT' "$plog" | tail -1)
    [[ -n $line ]] && echo "$line" | tee -a "$results" ||
      { echo "pytorch $peer failed:"; tail -5 "$plog"; }
  done
done

# the fastest peer of each (model, B, T)
declare -A best=() best_tag=()
while read -r _ tag rest; do
  [[ $tag == trainyard* ]] && continue
  declare -A kv=()
  for f in $rest; do kv[${f%%=*}]=${f#*=}; done
  key="${kv[model]}:${kv[B]}:${kv[T]}"
  if [[ -n ${kv[tok_s]:-} ]] && awk -v a="${kv[tok_s]}" -v b="${best[$key]:-0}" 'BEGIN { exit !(a > b) }'; then
    best[$key]=${kv[tok_s]}
    best_tag[$key]=$tag
  fi
  unset kv
done <"$results"

echo
printf '%-30s %-10s %4s %5s %12s %10s %8s %10s  %s\n' runner model B T "tokens/s" "ms/step" "MFU%" \
  "peak MiB" "vs best peer"
while read -r _ tag rest; do
  declare -A kv=()
  for f in $rest; do kv[${f%%=*}]=${f#*=}; done
  ms=${kv[median_ms]:-?}
  tok=${kv[tok_s]:-?}
  tf=${kv[tflops]:-0}
  mfu=$(awk -v t="$tf" -v p="$peak" 'BEGIN { printf "%.1f", 100 * t / p }')
  vs=""
  key="${kv[model]}:${kv[B]}:${kv[T]}"
  if [[ $tag == trainyard* && -n ${best[$key]:-} && $tok != "?" ]]; then
    vs=$(awk -v t="$tok" -v b="${best[$key]}" 'BEGIN { printf "%.3fx", t / b }')" (${best_tag[$key]})"
  fi
  printf '%-30s %-10s %4s %5s %12.0f %10s %8s %10s  %s\n' "$tag" "${kv[model]}" "${kv[B]}" \
    "${kv[T]}" "$tok" "$ms" "$mfu" "${kv[peak_mib]:-?}" "$vs"
  unset kv
done <"$results"
