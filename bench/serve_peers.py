"""The peers of bench/serve_bench.py, each on the same weights, the same
prompt and completion lengths and the same device as the Trainyard server:

- hf-static: transformers generate() with a static KV cache and the decode
  step compiled (torch.compile, mode "reduce-overhead": CUDA graphs), the
  fastest Hugging Face path; batch = the concurrency.
- hf: transformers generate(), the plain batch (dynamic cache, eager).
- llamacpp: llama.cpp's llama-batched-bench on a GGUF conversion of the
  weights.

run() returns one row per concurrency in serve_bench's form: tokens_per_s is
completion tokens over the whole time (prefill included), as the server's;
the time to first token is one figure for the whole batch (a static batch's
sequences all get their first token together), in p50, p90 and mean alike.
Skip says why a peer cannot run here (its package or program is missing).
"""
import json
import os
import shlex
import subprocess
import sys
import time


class Skip(Exception):
    """The peer cannot run here; the message says why and what to install."""


def run(peer, args, model, vocab, show):
    """The peer's rows; show(row) prints each as it comes."""
    if peer == "llamacpp":
        return llamacpp_rows(args, model, show)
    return hf_rows(args, model, vocab, peer == "hf-static", show)


def _prompts(count, length, vocab):
    # The same ids as serve_bench's make_prompts.
    return [[(7 + 31 * (i * length + t)) % vocab for t in range(length)] for i in range(count)]


def batch_row(engine, c, new_tokens, seconds, ttft, **extra):
    return dict({"engine": engine, "concurrency": c, "tokens_per_s": c * new_tokens / seconds,
                 "wall_s": seconds, "ttft": "whole batch", "ttft_p50_s": ttft,
                 "ttft_p90_s": ttft, "ttft_mean_s": ttft, "ttft_max_s": ttft}, **extra)


# ---------------------------------------------------------------- transformers

def _import_torch(device):
    try:
        import torch
        import transformers
    except ImportError as e:
        raise Skip(f"python package '{e.name}' is not installed "
                   f"(pip install torch transformers)") from e
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise Skip(f"torch {torch.__version__} sees no CUDA device for --device {device}")
    return torch, transformers


def _left_padded(torch, prompts, pad, device):
    """ids and attention mask, shorter prompts padded on the left (serve_bench's
    prompts all have one length, so nothing is padded; the mask is still
    given, as a real padded batch would)."""
    width = max(len(p) for p in prompts)
    ids = [[pad] * (width - len(p)) + p for p in prompts]
    mask = [[0] * (width - len(p)) + [1] * len(p) for p in prompts]
    return (torch.tensor(ids, device=device), torch.tensor(mask, device=device))


def hf_rows(args, model_dir, vocab, static, show):
    torch, transformers = _import_torch(args.device)
    engine = "hf-static" if static else "hf"
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    # transformers 4.56 renamed from_pretrained's torch_dtype to dtype.
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, **{key: dtype})
    model = model.to(args.device).eval()
    options = {}
    if static:
        try:
            from transformers import CompileConfig
        except ImportError as e:
            raise Skip(f"transformers {transformers.__version__} has no CompileConfig "
                       f"(generate's compiled static-cache path): pip install -U transformers"
                       ) from e
        compile_config = CompileConfig(mode="reduce-overhead")
        # generate() compiles on accelerators only unless told; the same path
        # on cpu keeps this peer testable without a GPU.
        compile_config._compile_all_devices = True
        options = {"cache_implementation": "static", "compile_config": compile_config}
        # One compiled graph per batch size and cache length: more than the
        # default limit of recompilations, past which dynamo runs eagerly.
        dynamo = torch._dynamo.config
        for knob in ("cache_size_limit", "recompile_limit"):
            if hasattr(dynamo, knob):
                setattr(dynamo, knob, max(getattr(dynamo, knob), 64))
    sampling = ({"do_sample": True, "temperature": args.temperature} if args.temperature > 0
                else {"do_sample": False})
    cuda = args.device.startswith("cuda")

    def generate(ids, mask, n):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n,
                                 min_new_tokens=n, pad_token_id=0, **sampling, **options)
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        if tuple(out.shape) != (ids.shape[0], ids.shape[1] + n):
            raise RuntimeError(f"{engine}: generate() returned shape {tuple(out.shape)}, "
                               f"not {(ids.shape[0], ids.shape[1] + n)}")
        return seconds

    rows = []
    for c in args.levels:
        ids, mask = _left_padded(torch, _prompts(c, args.prompt_len, vocab), 0, args.device)
        started = time.perf_counter()
        for _ in range(max(args.hf_warmup, 1 if static else 0)):
            generate(ids, mask, args.new_tokens)  # compiles (hf-static) and warms
        warm = time.perf_counter() - started
        if static and not hasattr(model, "_compiled_call"):
            raise RuntimeError("hf-static: generate() did not compile the model's forward "
                               "(transformers changed its auto-compile rules?)")
        seconds = generate(ids, mask, args.new_tokens)
        generate(ids, mask, 1)  # the prefill alone, warmed
        ttft = generate(ids, mask, 1)
        row = batch_row(engine, c, args.new_tokens, seconds, ttft, warmup_s=warm,
                        torch=torch.__version__, transformers=transformers.__version__)
        rows.append(row)
        show(row)
    del model
    if cuda:
        torch.cuda.empty_cache()
    return rows


# ------------------------------------------------------------------- llama.cpp

def llamacpp_rows(args, model_dir, show):
    src = os.path.abspath(args.llamacpp_dir)
    bench = os.path.join(src, "build", "bin", "llama-batched-bench")
    convert = os.path.join(src, "convert_hf_to_gguf.py")
    if not os.path.isfile(convert):
        raise Skip(f"{convert} is missing: --llamacpp-dir must be a llama.cpp source folder")
    if not os.access(bench, os.X_OK):
        raise Skip(f"{bench} is missing: build it with bench/llamacpp_build.sh {src}")
    outtype = {"bf16": "bf16", "f16": "f16", "f32": "f32"}[args.dtype]
    gguf = os.path.join(args.work, f"{os.path.basename(model_dir.rstrip('/'))}-{outtype}.gguf")
    if not os.path.exists(gguf):
        part = gguf[:-len(".gguf")] + ".part.gguf"
        cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                            "gguf_convert.py"), src, model_dir,
               "--outfile", part, "--outtype", outtype]
        print("llamacpp: " + shlex.join(cmd), file=sys.stderr, flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists(part):
            raise RuntimeError(f"convert_hf_to_gguf.py exited with {r.returncode}: "
                               f"{(r.stderr or r.stdout)[-3000:]}")
        os.replace(part, gguf)
    p, n = args.prompt_len, args.new_tokens
    # Without a shared prompt every sequence keeps its own p + n cells, and
    # llama-batched-bench silently leaves out a row whose cells exceed -c.
    cmd = [bench, "-m", gguf, "-c", str(max(args.levels) * (p + n)), "-ngl", "99",
           "-npp", str(p), "-ntg", str(n), "-npl", ",".join(map(str, args.levels))]
    cmd += shlex.split(args.llamacpp_args or "")
    print("llamacpp: " + shlex.join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"llama-batched-bench exited with {r.returncode}: "
                           f"{(r.stderr + r.stdout)[-3000:]}")
    table = parse_batched_bench(r.stdout + "\n" + r.stderr)
    rows = []
    for c in args.levels:
        got = [t for t in table if t["B"] == c and t["PP"] == p and t["TG"] == n]
        if not got:
            raise RuntimeError(f"llama-batched-bench printed no row for B={c}, PP={p}, TG={n}; "
                               f"its output ends: {(r.stdout + r.stderr)[-2000:]}")
        t = got[0]
        row = batch_row("llamacpp", c, n, t["T s"], t["T_PP s"], s_tg_tokens_per_s=t["S_TG t/s"],
                        s_total_tokens_per_s=t["S t/s"], gguf=gguf, command=shlex.join(cmd),
                        sampling="none (llama-batched-bench decodes without sampling)")
        rows.append(row)
        show(row)
    return rows


def parse_batched_bench(text):
    """The rows of llama-batched-bench's markdown table, by column name."""
    header, rows = None, []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|"):
            continue
        cells = [x.strip() for x in line.strip("|").split("|")]
        if "S_TG t/s" in cells:
            header = cells
        elif header and len(cells) == len(header) and not cells[0].startswith("-"):
            try:
                values = [float(x) for x in cells]
            except ValueError:
                continue
            row = dict(zip(header, values))
            for k in ("PP", "TG", "B"):
                row[k] = int(row[k])
            rows.append(row)
    if header is None:
        raise RuntimeError("llama-batched-bench printed no table (no 'S_TG t/s' column)")
    need = {"PP", "TG", "B", "T_PP s", "S_TG t/s", "T s", "S t/s"}
    if not need <= set(header):
        raise RuntimeError(f"llama-batched-bench's table lacks {sorted(need - set(header))}: "
                           f"{json.dumps(header)}")
    return rows
