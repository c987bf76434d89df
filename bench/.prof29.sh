set -u
here=$(pwd); ty=$here/build-device/bin/trainyard
export LD_LIBRARY_PATH=$here/build-device/lib/deps
$ty conform --backend cuda:0 --tier all --ops 'paged_*' --summary 2>&1 | tail -3
python3 - "$here" <<'PY'
import argparse, os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "bench"))
import serve_bench
tok = os.path.join(sys.argv[1], "tests", "fixtures", "tokenizers", "gpt2", "tokenizer.json")
serve_bench.random_model(argparse.Namespace(random="gpt2-124m", dtype="bf16", tokenizer=tok, work="/tmp/sb"))
PY
ids=$(python3 -c "print(','.join(str(i*37%1000) for i in range(128)))")
TRAINYARD_PROFILE=1 $ty generate --model /tmp/sb/gpt2-124m-bf16 --backend cuda:0 --dtype bf16 --prompt-ids $ids --max-new-tokens 32 2>&1 | head -14
timeout 200 python3 bench/serve_bench.py --trainyard $ty --backend cuda:0 --random gpt2-124m --dtype bf16 --work /tmp/sb --concurrency 1,64 2>&1 | tail -4
