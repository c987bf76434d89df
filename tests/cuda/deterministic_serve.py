#!/usr/bin/env python3
"""Issue 34's serve acceptance on a GPU: `trainyard serve --deterministic`
gives every request the same tokens and log-probabilities, bit for bit,
whether it is served alone or among 256 concurrent requests.

A GPT-2-shaped model with random weights (bench/serve_bench.py writes it)
is served on --backend; N requests (prompts of 5 to 64 ids, greedy, a seed
each, ignore_eos, logprobs and token ids returned) are sent one at a time,
then all at once. With --deterministic every request's token ids and
token_logprobs must match exactly (exit 1 otherwise, naming the first
request that differs). --modes det,default runs the server both ways in the
same process and prints the tokens/s of each and their ratio; the default
mode's mismatches are reported, not failed (batch-invariance is not its
promise). Standard library only (numpy to write the weights).

  python3 tests/cuda/deterministic_serve.py --trainyard build/bin/trainyard \\
      --backend cuda:0 --dtype bf16 --requests 256 --modes det,default
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import serve_bench  # noqa: E402  (write_random_model, SHAPES)


def start_server(args, model, deterministic, ctx):
    cmd = [args.trainyard, "serve", "--model", model, "--backend", args.backend, "--port", "0",
           "--max-batch", str(args.requests), "--ctx", str(ctx), "--dtype", args.dtype,
           # every request comes from 127.0.0.1: lift the per-client limit (128)
           "--max-connections-per-client", str(max(128, 2 * args.requests)),
           "--prefill-chunk", "64", "--max-queue", "4096"]
    if deterministic:
        cmd.append("--deterministic")
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.search(r"127\.0\.0\.1:(\d+)/v1 \(model '([^']+)'", line)
    if not m:
        proc.wait()
        raise SystemExit(f"deterministic_serve: the server did not start ({' '.join(cmd)}): "
                         f"{line!r}")
    print(f"server ({'--deterministic' if deterministic else 'default'}) ready in "
          f"{time.time() - t0:.1f} s", flush=True)
    return proc, int(m.group(1)), m.group(2)


def one_request(port, name, prompt, seed, new_tokens, out, i):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", body=json.dumps(
        {"model": name, "prompt": prompt, "max_tokens": new_tokens, "temperature": 0,
         "seed": seed, "ignore_eos": True, "logprobs": 0, "return_token_ids": True}))
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    if resp.status != 200:
        raise SystemExit(f"deterministic_serve: HTTP {resp.status}: {body[:300]!r}")
    choice = json.loads(body)["choices"][0]
    # Floats compared as JSON text: the server prints 17 digits (exact).
    out[i] = (choice["token_ids"], [repr(x) for x in choice["logprobs"]["token_logprobs"]])


def run_all(port, name, prompts, new_tokens, together):
    out = [None] * len(prompts)
    t0 = time.time()
    if together:
        threads = [threading.Thread(target=one_request,
                                    args=(port, name, p, 1000 + i, new_tokens, out, i))
                   for i, p in enumerate(prompts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for i, p in enumerate(prompts):
            one_request(port, name, p, 1000 + i, new_tokens, out, i)
    wall = time.time() - t0
    if any(o is None for o in out):
        raise SystemExit("deterministic_serve: a request got no answer")
    return out, len(prompts) * new_tokens / wall


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trainyard", required=True)
    p.add_argument("--backend", default="cuda:0")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--requests", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--modes", default="det,default", help="det, default or both (det,default)")
    p.add_argument("--work", default="/tmp/ty-det-serve")
    p.add_argument("--json-out")
    args = p.parse_args()
    model = os.path.join(args.work, "gpt2-124m")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        serve_bench.write_random_model(serve_bench.SHAPES["gpt2-124m"], model, os.path.join(
            HERE, "..", "fixtures", "tokenizers", "gpt2", "tokenizer.json"))
    n = args.requests
    prompts = [[(7 + 131 * i + 31 * t) % 50257 for t in range(5 + (i * 37) % 60)]
               for i in range(n)]
    ctx = max(len(q) for q in prompts) + args.new_tokens
    status, rates = 0, {}
    for mode in args.modes.split(","):
        det = mode == "det"
        proc, port, name = start_server(args, model, det, ctx)
        try:
            run_all(port, name, prompts[:2], 2, False)  # warm: compile the step graphs
            alone, alone_tps = run_all(port, name, prompts, args.new_tokens, False)
            crowd, crowd_tps = run_all(port, name, prompts, args.new_tokens, True)
        finally:
            proc.terminate()
            proc.wait(timeout=120)
        bad = [i for i in range(n) if alone[i] != crowd[i]]
        rates[mode] = (alone_tps, crowd_tps)
        print(f"{mode:8s} 1 at a time {alone_tps:8.1f} tok/s, {n} concurrent {crowd_tps:8.1f} "
              f"tok/s; {len(bad)} of {n} requests differ between the two", flush=True)
        for i in bad[:3]:
            pa, pc = list(zip(*alone[i])), list(zip(*crowd[i]))
            at = next((k for k, (x, y) in enumerate(zip(pa, pc)) if x != y), min(len(pa), len(pc)))
            print(f"  request {i} ({len(prompts[i])} prompt ids): first difference at token {at}:"
                  f" alone {pa[at:at + 1]}, concurrent {pc[at:at + 1]} (token id, logprob)")
        if det and bad:
            status = 1
    if "det" in rates and "default" in rates:
        d, b = rates["det"], rates["default"]
        print(f"cost of --deterministic: 1 at a time {d[0] / b[0]:.2f}x, {n} concurrent "
              f"{d[1] / b[1]:.2f}x the default's tokens/s")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"requests": n, "new_tokens": args.new_tokens, "tokens_per_s": rates,
                       "status": status}, f, indent=1)
    print("PASS" if status == 0 else "FAIL: --deterministic served a request differently")
    return status


if __name__ == "__main__":
    sys.exit(main())
