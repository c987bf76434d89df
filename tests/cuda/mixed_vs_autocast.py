#!/usr/bin/env python3
"""bf16-mixed against PyTorch's own bf16 autocast (torch and transformers
needed): for every model fixture, the relative error of the logits and of
the parameter gradients against a float64 transformers reference, for
(1) Trainyard `forward --dtype bf16-mixed --grads` on BACKEND (cuda:0) and
(2) transformers' model in f32 under torch.autocast(bfloat16) on DEVICE
(cuda). Issue 10 asks the first to be within what the second gives; the
table goes to docs/performance.md.

Inputs: the fixture's own (its expected.safetensors, 2 x 7 tokens), then
RANDOM more batches of 4 x 32 random tokens whose float64 reference (logits
and the gradients of the mean next-token cross-entropy, as
tests/fixtures/make_model_fixtures.py computes them) is made here. With
logits this small (a few hundred to a few thousand values) one input's
error depends on which values happen to round; the mean over the random
inputs is the comparison, the fixture's row is printed beside it.

Usage: mixed_vs_autocast.py --trainyard BIN --models tests/fixtures/models
         [--backend cuda:0] [--device cuda] [--random 8]
(`--backend cpu --device cpu` is the ctest mixed_vs_autocast_cpu.)
Exit 77 without torch/transformers; exit 1 when a mean Trainyard error is
more than 1.25x PyTorch's (and above 1e-3), or when Trainyard fails.
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import zlib

try:
    import torch
    import torch.nn.functional as F
    import transformers  # noqa: F401  (the model classes and the reference)
    from safetensors.torch import load_file
except ImportError as e:  # ctest's skip code: the reason stays visible
    print("SKIP: mixed_vs_autocast needs torch, transformers and safetensors (%s)" % e)
    sys.exit(77)

MODELS = ("gpt2", "llama", "llama3", "qwen2", "mistral")


def rel(a, b):
    a, b = a.detach().double().flatten().cpu(), b.detach().double().flatten().cpu()
    return float((a - b).norm() / b.norm())


def mean_loss(logits, ids):
    """Mean next-token cross-entropy over the B*(T-1) predicted positions."""
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1, :].reshape(-1, V).float(), ids[:, 1:].reshape(-1))


def reference(model64, ids):
    """float64 logits and parameter gradients (the fixtures' convention)."""
    model64.zero_grad(set_to_none=True)
    logits = model64(input_ids=ids).logits
    V = logits.shape[-1]
    F.cross_entropy(logits[:, :-1, :].reshape(-1, V), ids[:, 1:].reshape(-1)).backward()
    want = {"logits": logits.detach()}
    for n, p in model64.named_parameters():
        if p.grad is not None:
            want["grad." + n] = p.grad.detach().clone()
    return want


def autocast_errors(model, device, ids, want):
    model.zero_grad(set_to_none=True)
    x = ids.to(device)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(input_ids=x).logits
        loss = mean_loss(logits, x)
    loss.backward()
    grads = [rel(p.grad, want["grad." + n]) for n, p in model.named_parameters()
             if "grad." + n in want and p.grad is not None]
    return rel(logits.float(), want["logits"]), max(grads) if grads else float("nan")


def trainyard_errors(bin_, backend, model_dir, ids, want, tmp):
    tokens = os.path.join(tmp, "t.json")
    with open(tokens, "w") as f:
        json.dump(ids.tolist(), f)
    out = os.path.join(tmp, "o.safetensors")
    r = subprocess.run([bin_, "forward", "--model", model_dir, "--tokens", tokens, "--out", out,
                        "--backend", backend, "--dtype", "bf16-mixed", "--grads"],
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("trainyard forward on %s: %s" % (model_dir, r.stderr.strip()))
    got = load_file(out)
    grads = [rel(got[k].float(), want[k]) for k in want if k.startswith("grad.") and k in got]
    if not grads:
        raise RuntimeError("trainyard forward on %s wrote no gradients" % model_dir)
    return rel(got["logits"].float(), want["logits"]), max(grads)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainyard", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--backend", default="cuda:0", help="Trainyard's device (cuda:0)")
    ap.add_argument("--device", default="cuda", help="PyTorch's device (cuda)")
    ap.add_argument("--random", type=int, default=8, help="random 4x32 batches per model (8)")
    a = ap.parse_args()
    if a.random < 1:
        ap.error("--random must be at least 1")
    from transformers import AutoModelForCausalLM
    bad = 0
    print("%-8s %-14s %10s %10s %10s %10s" % ("model", "input", "ty logits", "pt logits",
                                              "ty grads", "pt grads"))
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            d = os.path.join(a.models, name)
            fixture = load_file(os.path.join(d, "expected.safetensors"))
            model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                         attn_implementation="sdpa").to(a.device)
            model64 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64,
                                                           attn_implementation="eager")
            model.train(False)
            model64.train(False)
            V = model64.config.vocab_size
            r = random.Random(zlib.crc32(name.encode()))
            inputs = [("fixture", fixture["input_ids"].long(), fixture)]
            for i in range(a.random):
                ids = torch.tensor([[r.randrange(V) for _ in range(32)] for _ in range(4)])
                inputs.append(("random %d" % i, ids, None))
            rows = []
            for label, ids, want in inputs:
                if want is None:
                    want = reference(model64, ids)
                ty = trainyard_errors(a.trainyard, a.backend, d, ids, want, tmp)
                pt = autocast_errors(model, a.device, ids, want)
                if label != "fixture":
                    rows.append(ty + pt)
                else:
                    print("%-8s %-14s %10.3g %10.3g %10.3g %10.3g" % (name, label, ty[0], pt[0],
                                                                      ty[1], pt[1]))
            mean = [sum(row[k] for row in rows) / len(rows) for k in range(4)]
            print("%-8s %-14s %10.3g %10.3g %10.3g %10.3g" % (
                name, "random mean", mean[0], mean[2], mean[1], mean[3]))
            for mine, theirs in ((mean[0], mean[2]), (mean[1], mean[3])):
                if not math.isnan(mine) and mine > 1e-3 and mine > 1.25 * theirs:
                    bad += 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
