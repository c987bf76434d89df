#!/usr/bin/env python3
"""`trainyard train --optimizer adafactor` against Hugging Face
transformers.Adafactor (PyTorch, CPU, float32) on the tiny Llama fixture:
the same batch (every row of a small dataset, so the trainer's shuffle only
reorders rows within it), 10 steps, no dropout and no clipping; the loss of
every step and the parameters after the last agree within 1e-6 (relative;
parameters normwise per tensor). Two configurations: a fixed lr with the
parameter scale (transformers' defaults otherwise), and the relative step with
warmup, a first moment (beta1) and weight decay.

Exit code 77 (skipped, with the reason) when torch or transformers is
missing; scripts/install-deps.sh installs both (CI runs it).
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import shutil
import argparse

try:
    import torch
    from transformers import LlamaForCausalLM
    from transformers.optimization import Adafactor
except ImportError as e:  # pragma: no cover - depends on the machine
    print("SKIP: torch and transformers are needed (%s); scripts/install-deps.sh installs them"
          % e)
    sys.exit(77)

B, T, VOCAB = 4, 16, 96
CONFIGS = {
    "lr-scaled": (["--lr", "1e-3", "--schedule", "constant", "--weight-decay", "0"],
                  dict(lr=1e-3, relative_step=False, scale_parameter=True, warmup_init=False)),
    "relative-momentum": (["--relative-step", "--warmup-init", "--beta1", "0.9", "--weight-decay",
                           "0.01", "--decay-all", "--clip-threshold", "0.5"],
                          dict(lr=None, relative_step=True, warmup_init=True, beta1=0.9,
                               weight_decay=0.01, clip_threshold=0.5)),
}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        assert t["dtype"] == "F32", (name, t["dtype"])
        out[name] = struct.unpack("<%df" % ((b - a) // 4), data[8 + n + a:8 + n + b])
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--models", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    tmp = tempfile.mkdtemp(prefix="ty_adafactor_hf_")
    failures = []
    try:
        # One document filling exactly B rows of T + 1 tokens: the stream is
        # EOS, the document, EOS (data prepare), rows overlap by one token.
        ids = [(7 * i * i + 3 * i + 1) % (VOCAB - 6) for i in range(B * T - 1)]
        with open(os.path.join(tmp, "d.jsonl"), "w") as f:
            f.write(json.dumps(ids) + "\n")
        data = os.path.join(tmp, "data")
        r = subprocess.run([args.trainyard, "data", "prepare", "--format", "ids", "--vocab-size",
                            str(VOCAB), "--eos-id", str(VOCAB - 1), "--input",
                            os.path.join(tmp, "d.jsonl"), "--seq-len", str(T), "--out", data],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        stream = [VOCAB - 1] + ids + [VOCAB - 1]
        rows = torch.tensor([stream[i * T:i * T + T + 1] for i in range(B)])
        model_dir = os.path.join(args.models, "llama")
        for name, (ty_args, hf_kwargs) in CONFIGS.items():
            out = os.path.join(tmp, name)
            r = subprocess.run([args.trainyard, "train", "--model", model_dir, "--data", data,
                                "--out", out, "--max-steps", "10", "--batch-size", str(B),
                                "--optimizer", "adafactor", "--clip", "0", "--cache-dir", "none"]
                               + ty_args, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr[-3000:]
            with open(os.path.join(out, "metrics.jsonl")) as f:
                ours = [json.loads(x)["loss"] for x in f if '"loss"' in x]
            model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                     attn_implementation="eager")
            model.train()
            opt = Adafactor(model.parameters(), **hf_kwargs)
            theirs = []
            for _ in range(10):
                logits = model(input_ids=rows[:, :T]).logits
                loss = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1),
                    reduction="sum") / (B * T)
                theirs.append(loss.item())
                opt.zero_grad()
                loss.backward()
                opt.step()
            loss_gap = max(abs(a - b) / abs(b) for a, b in zip(ours, theirs))
            weights = read_safetensors(os.path.join(out, "checkpoint-10", "model.safetensors"))
            param_gap = 0.0
            for pname, p in model.named_parameters():
                want = p.detach().reshape(-1).tolist()
                got = weights[pname]
                num = sum((a - b) ** 2 for a, b in zip(got, want))
                den = sum(b * b for b in want)
                param_gap = max(param_gap, math.sqrt(num / den))
            print("%s: losses %s\n  transformers %s\n  worst loss gap %.2e, worst parameter "
                  "gap %.2e" % (name, ["%.7f" % x for x in ours], ["%.7f" % x for x in theirs],
                                loss_gap, param_gap))
            if len(ours) != 10 or loss_gap > 1e-6 or param_gap > 1e-6:
                failures.append(name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("FAILED: %s differ from transformers.Adafactor beyond 1e-6" % failures)
        return 1
    print("%d passed, 0 failed" % len(CONFIGS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
