#!/usr/bin/env python3
"""serve_bench: `trainyard serve` and its strongest peers in one run, one device.

For each concurrency C (default 1, 8, 32, 64, 256) it sends C streaming
completion requests at once over HTTP (prompts of --prompt-len random ids,
exactly --new-tokens tokens each: ignore_eos; greedy unless --temperature)
and reports the aggregate tokens/s (completion tokens of all C requests over
the wall time from the first request to the last token) and the time to
first token per request (p50, p90, mean). "At once": every request is
connected first, then all are sent together (a barrier), from client
processes of 8 requests each, so that neither thread start-up nor one
Python process parsing every stream sets the pace. Peers, run after the server has
stopped so that each engine has the device alone (bench/serve_peers.py):

  --peer hf-static  transformers generate(): static KV cache, the decode step
                    under torch.compile(mode="reduce-overhead"), batch C
  --peer hf         transformers generate(), the plain padded batch
                    (--transformers is its older name)
  --peer llamacpp   llama.cpp's llama-batched-bench (--llamacpp-dir DIR) on a
                    GGUF conversion of the same weights

A peer whose package or program is missing is skipped with the reason. Each
peer row shows its ratio to Trainyard at the same concurrency; '*' marks the
best peer of a concurrency. --json FILE keeps every figure, the card, the
date and the command line.

The model is a Hugging Face folder (--model DIR) or random weights of a shape
(--random gpt2-124m | llama-3.2-1b | llama-1b | tiny-gpt2 | tiny-llama | a
config.json), written once into --work (bf16 with --dtype bf16) with a
tokenizer (the GPT-2 test fixture by default: ids it has no token for make no
text). Only the standard library is needed, plus numpy for --random and
torch+transformers for the hf peers. docs/performance.md ("Serving") gives
the command lines of the one-run table and records results.
"""
import argparse
import datetime
import http.client
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_peers  # noqa: E402

_LLAMA = {"model_type": "llama", "hidden_act": "silu", "rms_norm_eps": 1e-5,
          "attention_bias": False, "mlp_bias": False, "architectures": ["LlamaForCausalLM"]}
# Names as transformers' GPT2Config and LlamaConfig spell them (the Hub's
# config.json form, GPT-2's n_ctx included, which llama.cpp's converter reads: rope_theta and rope_scaling, which transformers 5 reads
# into rope_parameters and llama.cpp's converter reads as they are).
SHAPES = {
    "gpt2-124m": {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12,
                  "n_head": 12, "n_positions": 1024, "n_ctx": 1024, "bos_token_id": 50256,
                  "eos_token_id": 50256, "layer_norm_epsilon": 1e-5,
                  "activation_function": "gelu_new", "tie_word_embeddings": True,
                  "architectures": ["GPT2LMHeadModel"]},
    # meta-llama/Llama-3.2-1B's shape (1,235,814,400 parameters).
    "llama-3.2-1b": dict(_LLAMA, vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                         num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=64, max_position_embeddings=131072, rope_theta=500000.0,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0,
                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 8192},
                         bos_token_id=128000, eos_token_id=128001, tie_word_embeddings=True),
    # TinyLlama-1.1B's shape.
    "llama-1b": dict(_LLAMA, vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                     num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                     max_position_embeddings=2048, rope_theta=10000.0, bos_token_id=1,
                     eos_token_id=2, tie_word_embeddings=False),
    # Seconds-long smoke tests of this script on cpu: the same families, a
    # few layers, the GPT-2 tokenizer's whole vocabulary.
    "tiny-gpt2": {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 64, "n_layer": 2,
                  "n_head": 4, "n_positions": 256, "n_ctx": 256, "bos_token_id": 50256,
                  "eos_token_id": 50256, "layer_norm_epsilon": 1e-5,
                  "activation_function": "gelu_new", "tie_word_embeddings": True,
                  "architectures": ["GPT2LMHeadModel"]},
    "tiny-llama": dict(_LLAMA, vocab_size=50257, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, max_position_embeddings=1024, rope_theta=500000.0,
                       rope_scaling={"rope_type": "llama3", "factor": 32.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 256},
                       bos_token_id=50256, eos_token_id=50256, tie_word_embeddings=True),
}
PEERS = ("hf-static", "hf", "llamacpp")


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
    d = c.get("head_dim") or e // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    shapes["model.embed_tokens.weight"] = [v, e]
    for i in range(c["num_hidden_layers"]):
        h = f"model.layers.{i}."
        shapes[h + "input_layernorm.weight"] = shapes[h + "post_attention_layernorm.weight"] = [e]
        shapes[h + "self_attn.q_proj.weight"] = [q, e]
        shapes[h + "self_attn.o_proj.weight"] = [e, q]
        shapes[h + "self_attn.k_proj.weight"] = shapes[h + "self_attn.v_proj.weight"] = [kv, e]
        shapes[h + "mlp.gate_proj.weight"] = shapes[h + "mlp.up_proj.weight"] = [f, e]
        shapes[h + "mlp.down_proj.weight"] = [e, f]
    shapes["model.norm.weight"] = [e]
    if not c.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = [v, e]
    return shapes


def _bf16_bytes(a):
    """float32 array -> bf16 bytes, rounded to nearest even (finite values)."""
    import numpy as np
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    r = u >> 16  # in place from here: the embedding of a 1B model is 1 GiB in f32
    r &= 1
    r += 0x7FFF
    r += u
    r >>= 16
    return r.astype(np.uint16).tobytes()


def write_random_model(config, folder, tokenizer, dtype="f32"):
    """config.json, model.safetensors (normal(0, 0.02), norms 1, biases 0;
    F32, or BF16 with dtype "bf16"), tokenizer.json and a tokenizer_config.json
    that names the plain fast tokenizer (so that converters read tokenizer.json
    as it is) in `folder`. The weights are written to a temporary name and
    renamed, so an interrupted run never leaves a half file that looks done."""
    import numpy as np
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    shutil.copy(tokenizer, os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast"}, f)
    shapes = parameter_shapes(config)
    width, name = (2, "BF16") if dtype == "bf16" else (4, "F32")
    header, offset = {}, 0
    for key, shape in shapes.items():
        size = width * int(np.prod(shape))
        header[key] = {"dtype": name, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(1)
    target = os.path.join(folder, "model.safetensors")
    with open(target + ".part", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for key, shape in shapes.items():
            if key.endswith("norm.weight") or re.search(r"ln_\w+\.weight$", key):
                a = np.ones(shape, np.float32)
            elif key.endswith(".bias"):
                a = np.zeros(shape, np.float32)
            else:
                a = rng.standard_normal(shape, np.float32) * 0.02
            f.write(_bf16_bytes(a) if width == 2 else a.tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(target + ".part", target)


def random_model(args):
    """The folder of --random's weights, written unless a folder with the same
    config.json and weights of the same dtype is already there."""
    shape = args.random
    if shape in SHAPES:
        config, name = SHAPES[shape], shape
    else:
        with open(shape) as f:
            config = json.load(f)
        name = os.path.basename(os.path.dirname(os.path.abspath(shape))) or "custom"
    weights = "bf16" if args.dtype == "bf16" else "f32"
    folder = os.path.join(args.work, f"{name}-{weights}")
    try:
        with open(os.path.join(folder, "config.json")) as f:
            same = json.load(f) == config
    except (OSError, ValueError):
        same = False
    if not same or not os.path.exists(os.path.join(folder, "model.safetensors")):
        print(f"writing random {weights} weights to {folder}", file=sys.stderr, flush=True)
        write_random_model(config, folder, args.tokenizer, weights)
    return folder


def percentile(values, q):
    """The q-th percentile (0..100), linear between the nearest ranks."""
    s = sorted(values)
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def ttft_figures(ttft):
    return {"ttft_p50_s": percentile(ttft, 50), "ttft_p90_s": percentile(ttft, 90),
            "ttft_mean_s": sum(ttft) / len(ttft), "ttft_max_s": max(ttft)}


# Flags serve_bench gives the server; --serve-args naming one replaces it.
def server_command(args, model, levels):
    extra = shlex.split(args.serve_args or "")
    named = {a.split("=", 1)[0] for a in extra if a.startswith("--")}
    most = max(levels)
    ctx = args.prompt_len + args.new_tokens
    ours = [("--max-batch", min(most, 1024)), ("--ctx", ctx),
            ("--prefill-chunk", min(args.chunk, ctx)), ("--max-queue", max(4096, 2 * most)),
            # Every request comes from 127.0.0.1: lift the per-client cap
            # (default 128) and keep room for all of them at once.
            ("--max-connections-per-client", 0), ("--max-connections", max(1024, most + 64))]
    if args.prefill_budget:
        ours.append(("--prefill-budget", args.prefill_budget))
    cmd = [args.trainyard] + (["--plugin-path", args.plugin_path] if args.plugin_path else [])
    cmd += ["serve", "--model", model, "--backend", args.backend, "--port", "0",
            "--dtype", args.dtype]
    for flag, value in ours:
        if flag not in named:
            cmd += [flag, str(value)]
    if args.deterministic:
        cmd.append("--deterministic")
    return cmd + extra


class Server:
    """`trainyard serve` on a free loopback port; its stderr kept in a file."""

    ERROR = re.compile(r"\b(error|fatal|panic|sanitizer)\b", re.I)

    def __init__(self, cmd, log_path):
        self.cmd, self.log_path = cmd, log_path
        self.log = open(log_path, "w+")
        started = time.time()
        print("server: " + shlex.join(cmd), file=sys.stderr, flush=True)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"127\.0\.0\.1:(\d+)/v1 \(model '([^']+)'", line)
        if not m:
            self.proc.wait()
            self.fail(f"the server did not start (exit {self.proc.returncode}): {line!r}")
        self.port, self.name = int(m.group(1)), m.group(2)
        print(f"server ready in {time.time() - started:.1f} s: {line.strip()}", file=sys.stderr,
              flush=True)

    def stderr(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def fail(self, what):
        tail = self.stderr()[-4000:]
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        raise SystemExit(f"serve_bench: {what}\nserver: {shlex.join(self.cmd)}\n"
                         f"its stderr ({self.log_path}) ends:\n{tail}")

    def check(self):
        """Fails unless the server still runs and its stderr names no error."""
        if self.proc.poll() is not None:
            self.fail(f"the server exited with {self.proc.returncode} during the run")
        bad = [line for line in self.stderr().splitlines() if self.ERROR.search(line)]
        if bad:
            self.fail("the server reported errors:\n  " + "\n  ".join(bad[:20]))

    def engine_times_settled(self):
        """engine_times once the engine is idle: two reads 10 ms apart that
        agree (the last step of a run may end after its client got the last
        token), and the monotonic times just before the first and just after
        the second of them, so that every step counted between two settled
        reads ran between those times."""
        start = time.monotonic()
        last = self.engine_times()
        for _ in range(500):
            time.sleep(0.01)
            now = self.engine_times()
            if now == last:
                return now, start, time.monotonic()
            start, last = time.monotonic(), now
        self.fail("the engine's step counters did not settle within 5 s of the run's end")

    def engine_times(self):
        """The engine's step counters from /metrics: steps, and the seconds of
        the steps, their graph runs and their reads (docs/formats.md)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        got = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                got[name] = float(value)
        keys = ("steps_total", "step_seconds_total", "run_seconds_total", "read_seconds_total")
        return {k: got["trainyard_engine_" + k] for k in keys}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            rc = self.proc.wait(timeout=120)
            if rc != 0:
                self.fail(f"the server exited with {rc} on SIGTERM")
        self.proc.stdout.close()


def one_request(port, body, out, index, barrier=None):
    """Sends one streaming completion; out[index] = (tokens, ttft, total,
    start) or the exception it met (raised again by the caller). With a
    barrier, the connection is made first and the request goes when every
    request of the run is connected (start: when it went, time.monotonic)."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
        conn.connect()
        if barrier is not None:
            barrier.wait()
        t0 = time.monotonic()
        conn.request("POST", "/v1/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
        first, usage, chunks, ids = None, None, 0, 0
        for raw in resp:
            if not raw.startswith(b"data: "):
                continue
            if raw.startswith(b"data: [DONE]"):
                break
            chunk = json.loads(raw[6:])
            if "error" in chunk:
                raise RuntimeError(f"error in the stream: {chunk['error']}")
            got = sum(len(c.get("token_ids") or []) for c in chunk.get("choices") or [])
            if first is None and got:
                first = time.monotonic() - t0
            chunks, ids = chunks + 1, ids + got
            usage = chunk.get("usage") or usage
        total = time.monotonic() - t0
        conn.close()
        if not usage:
            raise RuntimeError(f"the stream ended without usage ({chunks} chunks)")
        if ids != usage["completion_tokens"]:
            raise RuntimeError(f"the stream carried {ids} token ids for "
                               f"{usage['completion_tokens']} completion tokens")
        out[index] = (ids, first, total, t0)
    except Exception as e:  # noqa: BLE001 (carried to the caller)
        out[index] = e
        if barrier is not None:
            barrier.abort()  # the others stop waiting for this one


def _client_process(port, bodies, first_index, barrier, results):
    """One client process: a thread per request, all released by the shared
    barrier; puts (index, outcome) on `results` for each."""
    out = [None] * len(bodies)
    threads = [threading.Thread(target=one_request, args=(port, b, out, i, barrier))
               for i, b in enumerate(bodies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, o in enumerate(out):
        if isinstance(o, threading.BrokenBarrierError):
            o = "not sent: another request of the run failed before the start"
        elif isinstance(o, Exception):
            o = str(o) or repr(o)
        results.put((first_index + i, o))


# Requests per client process: parsing the streams of many requests in one
# Python process would make the client, not the server, set the pace.
REQUESTS_PER_PROCESS = 8


def measure(server, prompts, new_tokens, temperature, together=True):
    """Completion tokens/s over the whole run, and the times to first token.
    Together: every request is connected first and all are sent at once
    (a barrier), from client processes of REQUESTS_PER_PROCESS requests
    each; the wall time runs from the barrier to the last token."""
    out = [None] * len(prompts)
    bodies = [{"model": server.name, "prompt": p, "max_tokens": new_tokens,
               "temperature": temperature, "stream": True, "ignore_eos": True,
               # A chunk per token, even one whose text is empty or held
               # back (a partial UTF-8 character, an id the tokenizer lacks):
               # the first token's time is its own.
               "return_token_ids": True}
              for p in prompts]
    if temperature > 0:
        for i, b in enumerate(bodies):
            b["seed"] = 1000 + i
    if together:
        import multiprocessing
        ctx = multiprocessing.get_context("fork")
        barrier = ctx.Barrier(len(bodies) + 1)
        results = ctx.Queue()
        procs = [ctx.Process(target=_client_process,
                             args=(server.port, bodies[i:i + REQUESTS_PER_PROCESS], i, barrier,
                                   results))
                 for i in range(0, len(bodies), REQUESTS_PER_PROCESS)]
        for p in procs:
            p.start()
        try:
            barrier.wait(timeout=120)
        except threading.BrokenBarrierError:
            pass  # a request failed to connect: every one reports below
        t0 = time.monotonic()
        import queue
        for _ in bodies:
            try:
                index, outcome = results.get(timeout=1800)
            except queue.Empty:
                for p in procs:
                    p.kill()
                server.fail("a client process gave no result within 1800 s")
            out[index] = outcome if not isinstance(outcome, str) else RuntimeError(outcome)
        for p in procs:
            p.join()
        wall = max(o[3] + o[2] for o in out if not isinstance(o, Exception)) - t0 \
            if any(not isinstance(o, Exception) for o in out) else 0.0
    else:
        t0 = time.monotonic()
        for i, b in enumerate(bodies):
            one_request(server.port, b, out, i)
        wall = time.monotonic() - t0
    errors = [o for o in out if isinstance(o, Exception)]
    if errors:
        # The first cause, not a request that was only held back by it.
        causes = [e for e in errors if not str(e).startswith("not sent:")] or errors
        server.fail(f"{len(errors)} of {len(out)} requests failed; the first: {causes[0]}")
    short = [o[0] for o in out if o[0] != new_tokens]
    if short:
        server.fail(f"{len(short)} requests got {short[0]} tokens, not {new_tokens} "
                    f"(ignore_eos was asked)")
    return sum(o[0] for o in out) / wall, [o[1] for o in out], wall


def make_prompts(count, length, vocab):
    return [[(7 + 31 * (i * length + t)) % vocab for t in range(length)] for i in range(count)]


def card_name(backend):
    """The GPU's name (torch) when the backend is cuda, else the backend URI."""
    m = re.match(r"cuda:(\d+)", backend)
    if m:
        try:
            import torch
            if torch.cuda.is_available():
                return torch.cuda.get_device_name(int(m.group(1)))
        except Exception:  # noqa: BLE001 (torch missing or broken: the URI says enough)
            pass
    return backend


def trainyard_rows(args, model, levels, vocab):
    os.makedirs(args.work, exist_ok=True)
    log = os.path.join(args.work, "serve-stderr.log")
    server = Server(server_command(args, model, levels), log)
    rows = []
    try:
        for c in levels:
            prompts = make_prompts(c, args.prompt_len, vocab)
            # Warm at this concurrency: the step graphs of its batch sizes.
            measure(server, prompts, 2, args.temperature)
            row = {"engine": "trainyard", "concurrency": c}
            if args.sequential:
                seq_tps, seq_ttft, _ = measure(server, prompts, args.new_tokens,
                                               args.temperature, together=False)
                row["sequential_tokens_per_s"] = seq_tps
                row["sequential_ttft_mean_s"] = sum(seq_ttft) / len(seq_ttft)
            before, window_start, _ = server.engine_times_settled()
            tps, ttft, wall = measure(server, prompts, args.new_tokens, args.temperature)
            after, _, window_end = server.engine_times_settled()
            d = {k: after[k] - before[k] for k in after}
            row.update({"tokens_per_s": tps, "wall_s": wall, "ttft": "per request, HTTP",
                        **ttft_figures(ttft)})
            if d["steps_total"] > 0:
                # Where the wall time went: the engine's steps (of which the
                # graph runs and the reads back) and, the rest, the server
                # between steps; per step, in ms. The wall runs from the
                # clients' barrier to the last token, so a step that starts
                # before the barrier's time is taken or ends after the last
                # token is sent can make the steps' sum exceed it by a step;
                # the window (between the settled reads) holds every step.
                per = 1e3 / d["steps_total"]
                row["engine_steps"] = int(d["steps_total"])
                row["ms_per_step"] = {
                    "wall": wall * per, "window": (window_end - window_start) * per,
                    "step": d["step_seconds_total"] * per,
                    "run": d["run_seconds_total"] * per, "read": d["read_seconds_total"] * per}
                m = row["ms_per_step"]
                print(f"      engine: {row['engine_steps']} steps, {m['wall']:.3f} ms of wall "
                      f"each: step {m['step']:.3f} (run {m['run']:.3f}, read {m['read']:.3f}), "
                      f"between steps {m['wall'] - m['step']:.3f}", file=sys.stderr, flush=True)
            if args.sequential:
                row["speedup"] = tps / row["sequential_tokens_per_s"]
            rows.append(row)
            print_row(row, None)
            server.check()
        server.check()
    finally:
        server.stop()
    return rows, server.cmd


HEADER = (f"{'C':>4}  {'engine':<10} {'tokens/s':>10} {'ttft p50':>10} {'p90':>10} "
          f"{'mean':>10}  {'vs trainyard':>12}\n"
          "(peers' first token: the whole batch's; '*': the best peer of a concurrency)")


def print_row(row, ratio, best=False):
    ms = lambda k: f"{row[k] * 1e3:8.1f}ms"  # noqa: E731
    vs = f"{ratio:11.2f}x" if ratio is not None else f"{'':12}"
    print(f"{row['concurrency']:>4}  {row['engine']:<10} {row['tokens_per_s']:10.1f} "
          f"{ms('ttft_p50_s')} {ms('ttft_p90_s')} {ms('ttft_mean_s')}  {vs}"
          f"{' *' if best else ''}", flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    p.add_argument("--trainyard", required=True, help="the trainyard binary")
    p.add_argument("--plugin-path")
    p.add_argument("--model", help="a Hugging Face model folder")
    p.add_argument("--random", help="random weights: " + ", ".join(SHAPES) + " or a config.json")
    p.add_argument("--tokenizer", default=os.path.join(HERE, "..", "tests", "fixtures",
                                                       "tokenizers", "gpt2", "tokenizer.json"))
    p.add_argument("--work", default="/tmp/trainyard-serve-bench",
                   help="random weights, GGUF conversions and the server's stderr")
    p.add_argument("--backend", default="cpu", help="Trainyard's device (cpu, cuda:0)")
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"])
    p.add_argument("--concurrency", default="1,8,32,64,256")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0,
                   help="0 (default): greedy; else sampled (seeded per request)")
    p.add_argument("--chunk", type=int, default=128, help="serve --prefill-chunk")
    p.add_argument("--prefill-budget", type=int, default=2048,
                   help="serve --prefill-budget (0: the server's default, one chunk a step)")
    p.add_argument("--serve-args", default="",
                   help="more `trainyard serve` options, one shell-quoted string; one that "
                        "serve_bench also sets replaces serve_bench's")
    p.add_argument("--deterministic", action="store_true",
                   help="serve --deterministic (batch-invariant kernels): its cost")
    p.add_argument("--sequential", action="store_true",
                   help="also the same C requests one after another (the batching speed-up)")
    p.add_argument("--peer", action="append", default=[],
                   help="a peer (hf-static, hf, llamacpp; repeat or comma-separate)")
    p.add_argument("--transformers", action="store_true", help="the same as --peer hf")
    p.add_argument("--device", help="the torch device of the hf peers (default: the cuda "
                                    "card of --backend, else cpu)")
    p.add_argument("--hf-warmup", type=int, default=2,
                   help="untimed generate() calls per concurrency before the timed one")
    p.add_argument("--llamacpp-dir", help="a llama.cpp source folder built by "
                                          "bench/llamacpp_build.sh")
    p.add_argument("--llamacpp-args", default="",
                   help="more llama-batched-bench options (e.g. '-fa on')")
    p.add_argument("--json", "--json-out", dest="json", help="write every figure here")
    args = p.parse_args(argv)
    if bool(args.model) == bool(args.random):
        p.error("give exactly one of --model and --random")
    if args.random and args.random not in SHAPES and not os.path.isfile(args.random):
        p.error(f"--random {args.random}: not a shape ({', '.join(SHAPES)}) nor a config.json")
    peers = [x for v in args.peer for x in v.split(",") if x]
    if args.transformers:
        peers.append("hf")
    for x in peers:
        if x not in PEERS:
            p.error(f"--peer {x}: unknown (known: {', '.join(PEERS)})")
    args.peers = [x for x in PEERS if x in peers]  # each once, in a fixed order
    if "llamacpp" in args.peers and not args.llamacpp_dir:
        p.error("--peer llamacpp needs --llamacpp-dir DIR (a llama.cpp source folder "
                "built by bench/llamacpp_build.sh)")
    try:
        args.levels = [int(x) for x in args.concurrency.split(",")]
    except ValueError:
        p.error(f"--concurrency {args.concurrency}: give integers separated by commas")
    if not args.levels or min(args.levels) < 1:
        p.error("--concurrency: every level must be >= 1")
    if args.prompt_len < 1 or args.new_tokens < 1:
        p.error("--prompt-len and --new-tokens must be >= 1")
    if not args.device:
        m = re.match(r"cuda:(\d+)", args.backend)
        args.device = f"cuda:{m.group(1)}" if m else "cpu"
    return args


def main(argv=None):
    args = parse_args(argv)
    model = random_model(args) if args.random else args.model
    with open(os.path.join(model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    card = card_name(args.backend)
    print(f"{os.path.basename(model)}, trainyard on {args.backend} ({card}), {args.dtype}, "
          f"prompt {args.prompt_len} + {args.new_tokens} new tokens, "
          f"{'greedy' if args.temperature <= 0 else f'temperature {args.temperature}'}",
          flush=True)
    print(HEADER, flush=True)
    rows, cmd = trainyard_rows(args, model, args.levels, vocab)
    skipped, failed = [], []
    for peer in args.peers:
        try:
            peer_rows = serve_peers.run(peer, args, model, vocab,
                                        lambda r: print_row(r, None))
        except serve_peers.Skip as e:
            print(f"peer {peer} skipped: {e}", flush=True)
            skipped.append({"peer": peer, "reason": str(e)})
            continue
        except Exception as e:  # noqa: BLE001 (kept; the run fails at its end)
            print(f"peer {peer} FAILED: {type(e).__name__}: {e}", flush=True)
            failed.append({"peer": peer, "error": f"{type(e).__name__}: {e}"})
            continue
        rows += peer_rows
    mark_peers(rows)
    print("\n" + HEADER)
    for c in args.levels:
        for r in rows:
            if r["concurrency"] == c:
                print_row(r, r.get("ratio_to_trainyard"), r.get("best_peer", False))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                           timespec="seconds"),
                       "command": shlex.join([sys.executable] + sys.argv),
                       "card": card, "backend": args.backend, "dtype": args.dtype,
                       "model": model, "shape": args.random, "prompt_len": args.prompt_len,
                       "new_tokens": args.new_tokens, "temperature": args.temperature,
                       "concurrency": args.levels, "server_command": shlex.join(cmd),
                       "rows": rows, "skipped": skipped, "failed": failed}, f, indent=1)
    if failed:
        raise SystemExit(f"serve_bench: {len(failed)} peer(s) failed: "
                         + "; ".join(f"{x['peer']}: {x['error']}" for x in failed))


def mark_peers(rows):
    """Each peer row's ratio to Trainyard at its concurrency; the best peer
    of each concurrency (most tokens/s) flagged."""
    ours = {r["concurrency"]: r["tokens_per_s"] for r in rows if r["engine"] == "trainyard"}
    best = {}
    for r in rows:
        if r["engine"] == "trainyard":
            continue
        r["ratio_to_trainyard"] = r["tokens_per_s"] / ours[r["concurrency"]]
        r["best_peer"] = False
        b = best.get(r["concurrency"])
        if b is None or r["tokens_per_s"] > b["tokens_per_s"]:
            best[r["concurrency"]] = r
    for r in best.values():
        r["best_peer"] = True


if __name__ == "__main__":
    main()
