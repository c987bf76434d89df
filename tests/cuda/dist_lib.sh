# Helpers the multi-GPU check scripts share (sourced by tests/cuda/
# dist_check.sh, mp_check.sh and scale_check.sh; bash).

# metrics.jsonl -> "step loss" lines
losses() { sed -n 's/.*"step": \([0-9]*\),.*"loss": \([-+0-9.eE]*\),.*/\1 \2/p' "$1" 2>/dev/null; }

# metrics.jsonl, skip -> the median tokens_per_s of the steps after `skip`
median_tok() {
  sed -n 's/.*"step": \([0-9]*\),.*"tokens_per_s": \([0-9.eE+]*\).*/\1 \2/p' "$1" 2>/dev/null |
    awk -v skip="$2" '$1 > skip {print $2}' | sort -g |
    awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print 0}'
}

# synth_ids FILE TOKENS VOCAB MINLEN SPAN STRIDE: documents of random
# arithmetic id runs (lengths MINLEN..MINLEN+SPAN, strides 1..STRIDE), about
# TOKENS ids in all, as a JSON list per line (`trainyard data prepare
# --format ids`); seeded, so every run trains on the same rows.
synth_ids() {
  awk -v tokens="$2" -v m="$3" -v lo="$4" -v span="$5" -v stride="$6" 'BEGIN { srand(12); done = 0
    while (done < tokens) { n = lo + int(rand() * span); s = int(rand() * m); st = 1 + int(rand() * stride)
      line = "["; for (i = 0; i < n; ++i) line = line (i ? "," : "") ((s + i * st) % m)
      print line "]"; done += n + 1 } }' >"$1"
}

# worst_gap A B: the worst relative gap between two "step loss" files over
# their common steps -> "COUNT WORST STEP"
worst_gap() {
  awk 'FNR == NR {a[$1] = $2; next} ($1 in a) {d = $2 - a[$1]; if (d < 0) d = -d;
       r = d / (a[$1] < 0 ? -a[$1] : a[$1]); n++; if (r > w) {w = r; at = $1}}
       END {printf "%d %.3g %d\n", n, w, at}' "$1" "$2"
}

# dist_env BUILD: the environment of BUILD's ranks (its plugins; its own
# copies of libraries the machine may lack, e.g. libmicrohttpd, without
# which every trainyard command exits 127; the driver's library; NCCL's
# NVLink multicast off), exported, and `mpi`, the mpirun command that
# passes it to every rank.
dist_env() {
  export TRAINYARD_BACKEND_PATH=$1/lib/trainyard/backends
  export LD_LIBRARY_PATH="$1/lib/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export TRAINYARD_CUDA_DRIVER=${TRAINYARD_CUDA_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
  export NCCL_NVLS_ENABLE=0
  mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE
       -x TRAINYARD_BACKEND_PATH -x LD_LIBRARY_PATH -x TRAINYARD_CUDA_DRIVER)
}
