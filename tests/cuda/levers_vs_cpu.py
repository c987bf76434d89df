#!/usr/bin/env python3
"""The memory levers of issue 13 on a GPU against cpu (tests/cuda/device_run.sh,
phase `memory`): `trainyard train` of the tiny Llama and GPT-2 fixtures for
STEPS steps with each lever alone and all together — --recompute layer,
--loss-chunk 5, --optimizer adafactor, --fused-optimizer (with clipping: its
norm pass), --offload optimizer (cuda only: cpu refuses it) — on cuda:0 and
on cpu, f32. Every cuda run must track the cpu run of the same levers and
the plain cuda run within 1e-4 relative per step (cuda matches cpu to 1e-4
on whole models; docs/cuda.md). Standard library only.

Usage: levers_vs_cpu.py --trainyard BIN --models DIR --data DIR [--steps N]
Exit 0 when every run agrees; 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

LEVERS = {
    "plain": [],
    "recompute-layer": ["--recompute", "layer"],
    "loss-chunk": ["--loss-chunk", "5"],
    "adafactor": ["--optimizer", "adafactor"],
    "fused-optimizer": ["--fused-optimizer"],
    "offload": ["--offload", "optimizer"],
    "all": ["--recompute", "layer", "--loss-chunk", "5", "--fused-optimizer", "--offload",
            "optimizer"],
}


def losses(ty, model, data, out, backend, steps, extra):
    cmd = [ty, "train", "--model", model, "--data", data, "--out", out, "--backend", backend,
           "--max-steps", str(steps), "--batch-size", "8", "--lr", "2e-3", "--warmup-steps", "2",
           "--cache-dir", "none", "--log-every", "1", "--save-every", "0"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr[-1500:]))
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f if '"loss"' in line]


def gap(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b)) if len(a) == len(b) else float("inf")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainyard", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for family in ("llama", "gpt2"):
            model = os.path.join(a.models, family)
            plain_cuda = None
            for name, extra in LEVERS.items():
                # Adafactor's curve differs from AdamW's: compare it with cpu only.
                cpu_extra = [x for x in extra if x not in ("--offload", "optimizer")]
                try:
                    cuda = losses(a.trainyard, model, a.data, os.path.join(tmp, family + name),
                                  "cuda:0", a.steps, extra)
                    cpu = losses(a.trainyard, model, a.data,
                                 os.path.join(tmp, family + name + "-cpu"), "cpu", a.steps,
                                 cpu_extra)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    print("FAIL %s %s: %s" % (family, name, e))
                    bad += 1
                    continue
                if plain_cuda is None:
                    plain_cuda = cuda
                vs_cpu = gap(cuda, cpu)
                vs_plain = gap(cuda, plain_cuda) if name != "adafactor" else 0.0
                ok = vs_cpu <= 1e-4 and vs_plain <= 1e-4
                bad += not ok
                print("%s %-6s %-16s cuda vs cpu %.2e, vs plain cuda %.2e; loss %.4f -> %.4f"
                      % ("ok  " if ok else "FAIL", family, name, vs_cpu, vs_plain, cuda[0],
                         cuda[-1]), flush=True)
    print("levers_vs_cpu: %s" % ("all agree" if not bad else "%d failures" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
