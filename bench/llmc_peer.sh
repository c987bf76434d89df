#!/usr/bin/env bash
# llm.c's train_gpt2cu (C/CUDA) as a second peer of bench/cuda_bench.sh
# (issue 10). Its code stays outside the project: a checkout of
# karpathy/llm.c in peers/llm.c (ignored by git; the device tool carries
# the built binary).
#
#   bench/llmc_peer.sh build LLMC_DIR
#       on the development machine: two compatibility edits to the checkout
#       (CUDA 13's cudaMemAdvise takes a cudaMemLocation; NVML left out, the
#       GPU machines' driver has it but the development machine cannot link
#       it), then nvcc for sm_90 without MPI, NCCL or cuDNN (llm.c's own
#       attention kernels): LLMC_DIR/train_gpt2cu. With CUDNN_FRONTEND=DIR
#       (a checkout of NVIDIA/cudnn-frontend, header-only, also ignored by
#       git) it also builds LLMC_DIR/train_gpt2cu_cudnn, llm.c's fastest
#       configuration (USE_CUDNN=1: cuDNN's flash attention, linked against
#       the toolkit's libcudnn; on the GPU machine the cuDNN that PyTorch's
#       wheels bring is found at run time, see `run`).
#   bench/llmc_peer.sh run|run-cudnn LLMC_DIR OUT_DIR [B ...]
#       on the GPU machine (run-cudnn: train_gpt2cu_cudnn, with PyTorch's
#       nvidia/cudnn/lib folder put on LD_LIBRARY_PATH): shards of random tokens in llm.c's format (a
#       256-int header: magic 20240520, version 1, token count; then uint16
#       tokens), GPT-2 124M from random init (-e d12), T=1024, STEPS (30)
#       steps per batch size (default "16 32"), no evaluation or sampling;
#       one RESULT line per B with the median tokens/s of the steps after
#       the first 10 (llm.c's own step lines), as cuda_bench.sh prints.
#   bench/llmc_peer.sh run-py LLMC_DIR OUT_DIR [B ...]
#       the same shards through llm.c's PyTorch reference, train_gpt2.py
#       (-model d12, bf16 autocast, flash attention, TF32, fused AdamW,
#       torch.compile with coordinate-descent tuning, loss inside the
#       compiled model): the torch.compile figures the issue quotes. Its
#       tokenizer import is stubbed (it only names the end-of-text token
#       when it samples, which this run never does).
set -uo pipefail
mode=${1:?usage: llmc_peer.sh build|run LLMC_DIR [OUT_DIR B...]}
dir=${2:?usage: llmc_peer.sh build|run LLMC_DIR [OUT_DIR B...]}
case $mode in
  build)
    cd "$dir" || exit 1
    grep -q 'host_loc' llmc/cuda_utils.cuh ||
      sed -i 's/cudaCheck_(cudaMemAdvise(\*out, bytes, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId), file, line);/{ cudaMemLocation host_loc = {}; host_loc.type = cudaMemLocationTypeHost; cudaCheck_(cudaMemAdvise(*out, bytes, cudaMemAdviseSetPreferredLocation, host_loc), file, line); }/' \
        llmc/cuda_utils.cuh
    sed -i 's/^#if __has_include(<nvml.h>)$/#if 0 \/* staged without NVML *\//' llmc/mfu.h
    grep -q 'host_loc' llmc/cuda_utils.cuh || { echo "the cudaMemAdvise edit did not apply"; exit 1; }
    nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
    "$nvcc" --threads=0 -t=0 --use_fast_math -std=c++17 -O3 \
      "--generate-code=arch=compute_90,code=[compute_90,sm_90]" -DENABLE_BF16 train_gpt2.cu \
      -lcublas -lcublasLt -o train_gpt2cu || exit 1
    if [[ -n ${CUDNN_FRONTEND:-} ]]; then
      fe=$(cd "$CUDNN_FRONTEND" && pwd)/include
      [[ -f $fe/cudnn_frontend.h ]] || { echo "no cudnn_frontend.h under $fe"; exit 1; }
      flags=(--threads=0 -t=0 --use_fast_math -std=c++17 -O3
        "--generate-code=arch=compute_90,code=[compute_90,sm_90]" -DENABLE_BF16 -DENABLE_CUDNN
        "-I$fe")
      { [[ cudnn_att.o -nt llmc/cudnn_att.cpp ]] || "$nvcc" "${flags[@]}" -c llmc/cudnn_att.cpp -o cudnn_att.o; } &&
        "$nvcc" "${flags[@]}" train_gpt2.cu cudnn_att.o -lcublas -lcublasLt -lcudnn \
          -lnvrtc -lcuda -o train_gpt2cu_cudnn || exit 1
    fi
    ;;
  run | run-cudnn | run-py)
    out=${3:?usage: llmc_peer.sh run|run-py LLMC_DIR OUT_DIR [B...]}
    shift 3
    sizes=("${@:-16 32}")
    # shellcheck disable=SC2206
    sizes=(${sizes[*]})
    steps=${STEPS:-30}
    mkdir -p "$out" && out=$(cd "$out" && pwd)
    python3 - "$out" "$steps" "${sizes[@]}" <<'PY'
import array, random, sys
out, steps, sizes = sys.argv[1], int(sys.argv[2]), [int(b) for b in sys.argv[3:]]
need = (steps + 2) * max(sizes) * 1024 + 1
r = random.Random(7)
for name, n in (("train", need), ("val", 64 * 1024 + 1)):
    header = array.array("i", [20240520, 1, n] + [0] * 253)
    tokens = array.array("H", (r.randrange(50257) for _ in range(n)))
    with open("%s/llmc_%s.bin" % (out, name), "wb") as f:
        header.tofile(f)
        tokens.tofile(f)
PY
    status=0
    tag=llmc
    bin=./train_gpt2cu
    if [[ $mode == run-cudnn ]]; then
      tag=llmc-cudnn
      bin=./train_gpt2cu_cudnn
      # the cuDNN of PyTorch's wheels (nvidia-cudnn-cu*), when the system has none
      cudnn_lib=$("${PYTHON:-python3}" -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)
      [[ -n $cudnn_lib ]] && export LD_LIBRARY_PATH=$cudnn_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
    if [[ $mode == run-py ]]; then
      tag=llmc-py-compile
      mkdir -p "$out/stub"
      printf '%s\n' '"""Stand-in for tiktoken: train_gpt2.py only asks for the GPT-2 encoding."""' \
        'class _Gpt2:' '    eot_token = 50256' 'def get_encoding(name):' '    return _Gpt2()' \
        >"$out/stub/tiktoken.py"
    fi
    for b in "${sizes[@]}"; do
      log="$out/$tag-gpt2-124m-$b-1024.log"
      if [[ $mode == run || $mode == run-cudnn ]]; then
        (cd "$dir" && timeout 300 "$bin" -i "$out/llmc_train.bin" -j "$out/llmc_val.bin" \
          -e d12 -b "$b" -t 1024 -x "$steps" -v 100000 -s 100000 -n 0 -l 6e-4 -c 0.1) >"$log" 2>&1
        rc=$?
        # step lines: "step   12/30 | loss ... | 33.21 ms | 45.1% bf16 MFU | 493012 tok/s"
        pat='s/^step *\([0-9]*\)\/.*| \([0-9.]*\) ms |.*| \([0-9]*\) tok\/s$/\1 \2/p'
      else
        (cd "$dir" && PYTHONPATH="$out/stub${PYTHONPATH:+:$PYTHONPATH}" timeout 500 \
          "${PYTHON:-python3}" train_gpt2.py --input_bin "$out/llmc_train.bin" --model d12 \
          --batch_size "$b" --sequence_length 1024 --total_batch_size $((b * 1024)) \
          --num_iterations "$steps" --learning_rate 6e-4 --weight_decay 0.1 --grad_clip 1.0 \
          --overfit_single_batch 0 --tensorcores 1 --compile 1 --flash 1 --dtype bfloat16 \
          --write_tensors 0) >"$log" 2>&1
        rc=$?
        # step lines: "step   12/30 | train loss ... | lr ... | (33.21 ms | 493012 tok/s)"
        pat='s/^step *\([0-9]*\)\/.*| (\([0-9.]*\) ms | \([0-9]*\) tok\/s)$/\1 \2/p'
      fi
      med=$(sed -n "$pat" "$log" |
        awk '$1 > 10 {print $2}' | sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}')
      if [[ $rc -ne 0 || -z $med ]]; then
        echo "$tag B=$b failed (exit $rc):"
        tail -5 "$log"
        status=1
        continue
      fi
      tok=$(awk -v ms="$med" -v b="$b" 'BEGIN {printf "%.1f", b * 1024 / (ms / 1000)}')
      echo "RESULT $tag model=gpt2-124m dtype=bf16-mixed B=$b T=1024 median_ms=$med tok_s=$tok"
    done
    exit $status
    ;;
  *)
    echo "usage: llmc_peer.sh build|run|run-cudnn|run-py LLMC_DIR [OUT_DIR B...]" >&2
    exit 2
    ;;
esac
