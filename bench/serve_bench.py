#!/usr/bin/env python3
"""serve_bench: `trainyard serve`'s continuous batching measured over HTTP.

For each concurrency C (default 1, 8, 32) it sends C streaming completion
requests at once (prompts of --prompt-len random ids, exactly --new-tokens
greedy tokens each: ignore_eos) and, as the baseline, the same C requests
one after another; it reports aggregate tokens/s of both, the speed-up and
the time to first token (mean, worst). With --transformers it also times
Hugging Face transformers' generate() on the same weights, on the same
device, for the same batch (C prompts, the same lengths, greedy) -- the
reference the issue asks to stand next to.

The model is a Hugging Face folder (--model DIR: GPT-2 124M, TinyLlama-1.1B,
...) or random weights of a shape (--random gpt2-124m | llama-1b | a
config.json), written once into --work with a tokenizer (the GPT-2 test
fixture by default: ids it has no token for simply make no text). Only the
standard library is needed, plus numpy for --random and torch+transformers
for --transformers. Examples:

  python3 bench/serve_bench.py --trainyard build/bin/trainyard --random gpt2-124m
  python3 bench/serve_bench.py --trainyard build/bin/trainyard --model ~/gpt2 \\
      --backend cuda:0 --transformers --device cuda:0 --concurrency 1,8,32
  python3 bench/serve_bench.py --trainyard build/bin/trainyard --random llama-1b \\
      --backend cuda:0 --transformers --device cuda:0

docs/performance.md ("Serving") records results and the machines.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = {
    "gpt2-124m": {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12,
                  "n_head": 12, "n_positions": 1024, "bos_token_id": 50256,
                  "eos_token_id": 50256, "layer_norm_epsilon": 1e-5,
                  "activation_function": "gelu_new", "tie_word_embeddings": True,
                  "architectures": ["GPT2LMHeadModel"]},
    # TinyLlama-1.1B's shape.
    "llama-1b": {"model_type": "llama", "vocab_size": 32000, "hidden_size": 2048,
                 "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
                 "num_key_value_heads": 4, "max_position_embeddings": 2048,
                 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "bos_token_id": 1,
                 "eos_token_id": 2, "tie_word_embeddings": False, "hidden_act": "silu",
                 "architectures": ["LlamaForCausalLM"]},
}


def parameter_shapes(c):
    """Hugging Face names and shapes of a gpt2 or llama config's parameters."""
    shapes = {}
    if c["model_type"] == "gpt2":
        e, v, p = c["n_embd"], c["vocab_size"], c["n_positions"]
        shapes["transformer.wte.weight"] = [v, e]
        shapes["transformer.wpe.weight"] = [p, e]
        for i in range(c["n_layer"]):
            h = f"transformer.h.{i}."
            for norm in ("ln_1", "ln_2"):
                shapes[h + norm + ".weight"] = shapes[h + norm + ".bias"] = [e]
            shapes[h + "attn.c_attn.weight"], shapes[h + "attn.c_attn.bias"] = [e, 3 * e], [3 * e]
            shapes[h + "attn.c_proj.weight"], shapes[h + "attn.c_proj.bias"] = [e, e], [e]
            shapes[h + "mlp.c_fc.weight"], shapes[h + "mlp.c_fc.bias"] = [e, 4 * e], [4 * e]
            shapes[h + "mlp.c_proj.weight"], shapes[h + "mlp.c_proj.bias"] = [4 * e, e], [e]
        shapes["transformer.ln_f.weight"] = shapes["transformer.ln_f.bias"] = [e]
        return shapes
    e, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    d = e // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * d
    shapes["model.embed_tokens.weight"] = [v, e]
    for i in range(c["num_hidden_layers"]):
        h = f"model.layers.{i}."
        shapes[h + "input_layernorm.weight"] = shapes[h + "post_attention_layernorm.weight"] = [e]
        shapes[h + "self_attn.q_proj.weight"] = shapes[h + "self_attn.o_proj.weight"] = [e, e]
        shapes[h + "self_attn.k_proj.weight"] = shapes[h + "self_attn.v_proj.weight"] = [kv, e]
        shapes[h + "mlp.gate_proj.weight"] = shapes[h + "mlp.up_proj.weight"] = [f, e]
        shapes[h + "mlp.down_proj.weight"] = [e, f]
    shapes["model.norm.weight"] = [e]
    if not c.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = [v, e]
    return shapes


def write_random_model(config, folder, tokenizer):
    """config.json, model.safetensors (normal(0, 0.02), norms 1, biases 0)
    and tokenizer.json in `folder`."""
    import numpy as np
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    shutil.copy(tokenizer, os.path.join(folder, "tokenizer.json"))
    shapes = parameter_shapes(config)
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(1)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape in shapes.items():
            if name.endswith("norm.weight") or re.search(r"ln_\w+\.weight$", name):
                f.write(np.ones(shape, np.float32).tobytes())
            elif name.endswith(".bias"):
                f.write(np.zeros(shape, np.float32).tobytes())
            else:
                f.write((rng.standard_normal(shape, np.float32) * 0.02).tobytes())


class Server:
    def __init__(self, args, model, slots, ctx):
        cmd = [args.trainyard]
        if args.plugin_path:
            cmd += ["--plugin-path", args.plugin_path]
        cmd += ["serve", "--model", model, "--backend", args.backend, "--port", "0",
                "--max-batch", str(slots), "--ctx", str(ctx), "--dtype", args.dtype,
                "--prefill-chunk", str(min(args.chunk, ctx)), "--max-queue", "4096"]
        if args.prefill_budget:
            cmd += ["--prefill-budget", str(args.prefill_budget)]
        if args.deterministic:
            cmd += ["--deterministic"]
        started = time.time()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"127\.0\.0\.1:(\d+)/v1 \(model '([^']+)'", line)
        if not m:
            self.proc.wait()
            raise SystemExit(f"serve_bench: the server did not start: {line!r}")
        self.port, self.name = int(m.group(1)), m.group(2)
        print(f"server ready in {time.time() - started:.1f} s: {line.strip()}", file=sys.stderr)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=120)


def one_request(server, prompt, new_tokens, out, index):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    t0 = time.time()
    conn.request("POST", "/v1/completions", body=json.dumps(
        {"model": server.name, "prompt": prompt, "max_tokens": new_tokens, "temperature": 0,
         "stream": True, "ignore_eos": True}))
    resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"serve_bench: HTTP {resp.status}: {resp.read()[:300]!r}")
    first, usage = None, None
    for raw in resp:
        if not raw.startswith(b"data: "):
            continue
        if first is None:
            first = time.time() - t0
        if raw.startswith(b"data: [DONE]"):
            break
        chunk = json.loads(raw[6:])
        usage = chunk.get("usage") or usage
    conn.close()
    out[index] = (usage["completion_tokens"], first, time.time() - t0)


def measure(server, prompts, new_tokens, together):
    """tokens/s over the whole run, and the times to first token."""
    out = [None] * len(prompts)
    t0 = time.time()
    if together:
        threads = [threading.Thread(target=one_request, args=(server, p, new_tokens, out, i))
                   for i, p in enumerate(prompts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for i, p in enumerate(prompts):
            one_request(server, p, new_tokens, out, i)
    wall = time.time() - t0
    tokens = sum(o[0] for o in out)
    return tokens / wall, [o[1] for o in out]


def transformers_generate(model_dir, device, dtype, prompts, new_tokens, repeats=2):
    """tokens/s of transformers' greedy generate() for the whole batch."""
    import torch
    from transformers import AutoModelForCausalLM
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch_dtype).to(device)
    model.eval()
    ids = torch.tensor(prompts, device=device)
    best = None
    for _ in range(repeats):  # the first run warms up kernels and allocators
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.time()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 do_sample=False, pad_token_id=0)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.time() - t0
        best = seconds if best is None else min(best, seconds)
    assert out.shape[1] == ids.shape[1] + new_tokens
    return len(prompts) * new_tokens / best


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trainyard", required=True)
    p.add_argument("--plugin-path")
    p.add_argument("--model", help="a Hugging Face model folder")
    p.add_argument("--random", help="random weights: gpt2-124m, llama-1b or a config.json")
    p.add_argument("--tokenizer", default=os.path.join(HERE, "..", "tests", "fixtures",
                                                       "tokenizers", "gpt2", "tokenizer.json"))
    p.add_argument("--work", default="/tmp/trainyard-serve-bench")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--dtype", default="f32")
    p.add_argument("--concurrency", default="1,8,32")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--chunk", type=int, default=64)
    p.add_argument("--prefill-budget", type=int, default=0,
                   help="serve --prefill-budget (0: the server's default, one chunk a step)")
    p.add_argument("--deterministic", action="store_true",
                   help="serve --deterministic (batch-invariant kernels): its cost")
    p.add_argument("--transformers", action="store_true")
    p.add_argument("--device", default="cpu", help="transformers' device (cpu, cuda:0)")
    p.add_argument("--json-out")
    args = p.parse_args()
    if bool(args.model) == bool(args.random):
        p.error("give exactly one of --model and --random")
    model = args.model
    if args.random:
        shape = args.random
        config = SHAPES.get(shape) or json.load(open(shape))
        name = shape if shape in SHAPES else os.path.basename(os.path.dirname(shape)) or "custom"
        model = os.path.join(args.work, name)
        if not os.path.exists(os.path.join(model, "model.safetensors")):
            print(f"writing random weights to {model}", file=sys.stderr)
            write_random_model(config, model, args.tokenizer)
    with open(os.path.join(model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    levels = [int(x) for x in args.concurrency.split(",")]
    server = Server(args, model, max(levels), args.prompt_len + args.new_tokens)
    rows = []
    try:
        for c in levels:
            prompts = [[(7 + 31 * (i * args.prompt_len + t)) % vocab for t in range(args.prompt_len)]
                       for i in range(c)]
            measure(server, prompts[:1], 2, False)  # warm
            seq_tps, seq_ttft = measure(server, prompts, args.new_tokens, False)
            tps, ttft = measure(server, prompts, args.new_tokens, True)
            row = {"concurrency": c, "batched_tokens_per_s": tps,
                   "sequential_tokens_per_s": seq_tps, "speedup": tps / seq_tps,
                   "ttft_mean_s": statistics.mean(ttft), "ttft_max_s": max(ttft),
                   "ttft_sequential_mean_s": statistics.mean(seq_ttft)}
            if args.transformers:
                row["transformers_tokens_per_s"] = transformers_generate(
                    model, args.device, args.dtype, prompts, args.new_tokens)
            rows.append(row)
            hf = (f"  transformers {row['transformers_tokens_per_s']:8.1f} t/s"
                  if args.transformers else "")
            print(f"C={c:<3d} batched {tps:8.1f} t/s  sequential {seq_tps:8.1f} t/s  "
                  f"speed-up {tps / seq_tps:5.2f}x  ttft mean {row['ttft_mean_s'] * 1e3:7.1f} ms"
                  f"  worst {row['ttft_max_s'] * 1e3:7.1f} ms{hf}", flush=True)
    finally:
        server.stop()
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"model": model, "backend": args.backend, "dtype": args.dtype,
                       "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
