#!/usr/bin/env python3
"""The opencl backend end to end, through the `trainyard` command (Python
standard library only; safetensors files are read with `struct`).

- ConformTest: `trainyard conform --backend opencl:0` passes every case of
  every op of op set v1, forward and backward, in f32, bf16 and f16 (and
  the integer cases): nothing fails, and nothing is unsupported except the
  ops the backend refuses by design, with its reason (REFUSED_OPS: the
  memory levers' fused loss and Adafactor have no OpenCL kernels yet).
- DevicesTest: opencl:N is listed with its OpenCL version, platform and
  extensions; without an ICD loader, or with one that finds no platform,
  the plugin is rejected as "unavailable" with the reason and the other
  backends still load.
- ForwardTest: `trainyard forward --backend opencl:0` on every model fixture
  matches transformers' float64 logits, loss and parameter gradients with
  relative error <= 1e-4 (and the bf16 checkpoints as the cpu test holds
  them).
- GenerateTest: `trainyard generate --greedy` gives the same tokens on
  opencl:0 as on cpu, and transformers' greedy continuation.
- TrainTest: 20 training steps of the tiny GPT-2 fixture (AdamW, clipping,
  dropout 0.1) on cpu and on opencl:0: every step's loss agrees within 1e-4
  relative (also the gradient norms), read from metrics.jsonl.

Exit code 77 (skipped, with the reason) when no OpenCL device is usable.
"""
import argparse
import csv
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

CFG = None


def run(args, env=None, timeout=600):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([CFG.trainyard] + args, capture_output=True, text=True, env=full_env,
                          timeout=timeout)


def read_safetensors(path):
    """{name: (shape, [floats or ints])} for F32, F64, BF16 and I64 tensors."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = data[base + a:base + b]
        dtype = t["dtype"]
        if dtype == "F32":
            values = struct.unpack("<%df" % (len(raw) // 4), raw)
        elif dtype == "F64":
            values = struct.unpack("<%dd" % (len(raw) // 8), raw)
        elif dtype == "I64":
            values = struct.unpack("<%dq" % (len(raw) // 8), raw)
        elif dtype == "BF16":
            halves = struct.unpack("<%dH" % (len(raw) // 2), raw)
            values = struct.unpack("<%df" % len(halves),
                                   struct.pack("<%dI" % len(halves), *[h << 16 for h in halves]))
        else:
            continue
        out[name] = (t["shape"], values)
    return out


def rel_error(got, want):
    num = sum((a - b) ** 2 for a, b in zip(got, want))
    den = sum(b * b for b in want)
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def devices_json(env=None):
    r = run(["devices", "--json"], env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# Ops opencl refuses in graph_supports ("opencl has no kernel for op ..."):
# `train --loss-chunk`, `--optimizer adafactor` and `--fused-optimizer`
# (global_norm_scale) are refused on it.
REFUSED_OPS = {"linear_cross_entropy", "linear_cross_entropy_backward", "adafactor_update",
               "global_norm_scale"}


class ConformTest(unittest.TestCase):
    def test_every_op_passes(self):
        r = run(["conform", "--backend", "opencl:0", "--json"])
        results = json.loads(r.stdout)
        refused = [x for x in results if x["op"] in REFUSED_OPS]
        for x in refused:
            self.assertEqual(x["status"], "unsupported", x)
            self.assertIn("opencl has no kernel for op '%s'" % x["op"], x["reason"])
        results = [x for x in results if x["op"] not in REFUSED_OPS]
        failed = [x for x in results if x["status"] != "pass"]
        self.assertEqual(failed, [], "\n".join("%s/%s %s %s: %s %s" % (
            x["op"], x["case"], x["dtype"], x["direction"], x["status"], x["reason"])
            for x in failed[:20]))
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        # Every op of the set, as `conform --list` names them.
        listing = run(["conform", "--list"]).stdout.split("\nBound classes")[0]
        ops = {line.split()[0] for line in listing.splitlines()[1:]
               if line and not line.startswith(" ")}
        self.assertEqual({x["op"] for x in results} | REFUSED_OPS, ops)
        counts = {}
        for x in results:
            key = (x["dtype"], x["direction"])
            counts[key] = counts.get(key, 0) + 1
        for dtype in ("f32", "bf16", "f16"):
            for direction in ("forward", "backward"):
                self.assertGreater(counts.get((dtype, direction), 0), 50, (dtype, direction))
        print("conform opencl:0: %d runs pass (%s); %d ops" % (
            len(results), ", ".join("%s %s %d" % (d, k, n) for (d, k), n in sorted(counts.items())),
            len(ops)), file=sys.stderr)


class DevicesTest(unittest.TestCase):
    def test_listed_with_version_and_extensions(self):
        data = devices_json()
        backend = [b for b in data["backends"] if b["name"] == "opencl"][0]
        self.assertGreaterEqual(len(backend["devices"]), 1)
        for i, d in enumerate(backend["devices"]):
            self.assertEqual(d["uri"], "opencl:%d" % i)
            self.assertTrue(d["name"])
            self.assertTrue(d["api_version"].startswith("OpenCL "), d["api_version"])
            self.assertIn("(platform: ", d["api_version"])
            self.assertGreater(d["memory_bytes"], 0)
            self.assertTrue(all(e.startswith("cl_") for e in d["extensions"]), d["extensions"])
        r = run(["devices"])
        self.assertIn("      api OpenCL ", r.stdout)
        self.assertIn("      extensions cl_", r.stdout)

    def check_unavailable(self, env, reason):
        data = devices_json(env)
        self.assertNotIn("opencl", [b["name"] for b in data["backends"]])
        self.assertIn("cpu", [b["name"] for b in data["backends"]])
        rejected = [r for r in data["rejected"] if r["name"] == "opencl"]
        self.assertEqual(len(rejected), 1, data["rejected"])
        self.assertEqual(rejected[0]["kind"], "unavailable")
        self.assertIn(reason, rejected[0]["reason"])
        # Asking for it says why it cannot be had.
        with tempfile.TemporaryDirectory() as tmp:
            tokens = os.path.join(tmp, "tokens.json")
            with open(tokens, "w") as f:
                f.write("[[1, 2, 3]]")
            r = run(["forward", "--model", os.path.join(CFG.models, "gpt2"), "--tokens", tokens,
                     "--out", os.path.join(tmp, "out.safetensors"), "--backend", "opencl:0"],
                    env=env)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("UNAVAILABLE", r.stderr)
        self.assertIn(reason, r.stderr)

    def test_unavailable_without_icd_loader(self):
        self.check_unavailable({"TRAINYARD_OPENCL_LIBRARY": "/nonexistent/libOpenCL.so.1"},
                               "cannot load the OpenCL ICD loader /nonexistent/libOpenCL.so.1")

    def test_unavailable_without_platform(self):
        with tempfile.TemporaryDirectory() as empty:
            self.check_unavailable({"OCL_ICD_VENDORS": empty}, "found no OpenCL platform")


class ForwardTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ty_opencl_forward_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def forward(self, model, ref, expected, logits_key, bound, grads, extra=()):
        want = read_safetensors(os.path.join(CFG.models, ref, expected))
        shape, ids = want["input_ids"]
        tokens = os.path.join(self.tmp, "tokens.json")
        with open(tokens, "w") as f:
            json.dump([list(ids[b * shape[1]:(b + 1) * shape[1]]) for b in range(shape[0])], f)
        out = os.path.join(self.tmp, "out.safetensors")
        args = ["forward", "--model", os.path.join(CFG.models, model), "--tokens", tokens,
                "--out", out, "--backend", "opencl:0"] + list(extra)
        r = run(args + (["--grads"] if grads else []))
        self.assertEqual(r.returncode, 0, r.stderr)
        got = read_safetensors(out)
        e = rel_error(got["logits"][1], want[logits_key][1])
        line = "%-14s %-12s logits rel %.3g" % (model, " ".join(extra), e)
        self.assertLessEqual(e, bound, line)
        if "loss" in want:
            loss_err = abs(got["loss"][1][0] - want["loss"][1][0]) / abs(want["loss"][1][0])
            line += ", loss rel %.3g" % loss_err
            self.assertLessEqual(loss_err, bound, line)
        if grads:
            names = [k for k in want if k.startswith("grad.")]
            self.assertEqual(sorted(names), sorted(k for k in got if k.startswith("grad.")))
            worst = max(rel_error(got[k][1], want[k][1]) for k in names)
            line += ", %d grads, worst rel %.3g" % (len(names), worst)
            self.assertLessEqual(worst, bound, line)
        print(line, file=sys.stderr)

    def test_families_match_transformers(self):
        for model in ("gpt2", "llama", "llama3", "qwen2", "mistral"):
            with self.subTest(model=model):
                self.forward(model, model, "expected.safetensors", "logits", 1e-4, True)
        self.forward("llama_sharded", "llama", "expected.safetensors", "logits", 1e-4, True)

    def test_bf16_checkpoints(self):
        for model in ("gpt2_bf16", "llama_bf16"):
            with self.subTest(model=model):
                # bf16 weights computed in f32 against transformers' f64 run of
                # the same weights; then bf16 storage throughout (the cpu
                # test's bound for two different bf16 roundings).
                self.forward(model, model, "expected_bf16.safetensors", "logits_f64", 1e-4,
                             False)
                self.forward(model, model, "expected_bf16.safetensors", "logits", 3e-2, False,
                             ("--dtype", "bf16"))


class GenerateTest(unittest.TestCase):
    def test_greedy_same_tokens_as_cpu(self):
        for model in ("gpt2", "llama", "llama3", "qwen2", "mistral"):
            with self.subTest(model=model):
                want = read_safetensors(os.path.join(CFG.models, model, "expected.safetensors"))
                prompt = ",".join(str(i) for i in want["greedy_prompt"][1])
                continuation = list(want["greedy_continuation"][1])
                ids = {}
                for backend in ("cpu", "opencl:0"):
                    r = run(["generate", "--model", os.path.join(CFG.models, model),
                             "--prompt-ids", prompt, "--max-new-tokens", "24", "--greedy",
                             "--json", "--backend", backend])
                    self.assertEqual(r.returncode, 0, r.stderr)
                    ids[backend] = json.loads(r.stdout)["ids"]
                print("%-8s opencl %s" % (model, ids["opencl:0"]), file=sys.stderr)
                self.assertEqual(ids["opencl:0"], ids["cpu"])
                self.assertEqual(ids["opencl:0"][:len(continuation)], continuation)


class TrainTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ty_opencl_train_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def make_dataset(self, vocab=96):
        """Learnable pre-tokenized documents (as tests/apps/test_train_cli.py)."""
        rng = random.Random(1)
        path = os.path.join(self.tmp, "data")
        with open(path + ".jsonl", "w") as f:
            for _ in range(300):
                start, step, n = rng.randrange(vocab - 6), rng.choice([1, 2, 3]), rng.randrange(8, 40)
                f.write(json.dumps([(start + i * step) % (vocab - 6) for i in range(n)]) + "\n")
        r = run(["data", "prepare", "--format", "ids", "--vocab-size", str(vocab), "--eos-id",
                 str(vocab - 1), "--input", path + ".jsonl", "--seq-len", "16",
                 "--val-fraction", "0.15", "--out", path])
        self.assertEqual(r.returncode, 0, r.stderr)
        return path

    def train(self, data, backend):
        out = os.path.join(self.tmp, "out-" + backend.replace(":", "-"))
        r = run(["train", "--model", os.path.join(CFG.models, "gpt2"), "--data", data,
                 "--out", out, "--max-steps", "20", "--batch-size", "8", "--lr", "3e-3",
                 "--warmup-steps", "2", "--dropout", "0.1", "--backend", backend,
                 "--log-every", "10"])
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        with open(os.path.join(out, "metrics.jsonl")) as f:
            return [json.loads(line) for line in f if '"loss"' in line]

    def test_twenty_steps_agree_with_cpu(self):
        data = self.make_dataset()
        cpu = self.train(data, "cpu")
        ocl = self.train(data, "opencl:0")
        self.assertEqual(len(cpu), 20)
        self.assertEqual(len(ocl), 20)
        worst_loss = worst_norm = 0.0
        for a, b in zip(cpu, ocl):
            self.assertEqual(a["step"], b["step"])
            el = abs(a["loss"] - b["loss"]) / abs(a["loss"])
            en = abs(a["grad_norm"] - b["grad_norm"]) / abs(a["grad_norm"])
            worst_loss, worst_norm = max(worst_loss, el), max(worst_norm, en)
            self.assertLessEqual(el, 1e-4, "step %d: loss %r on cpu, %r on opencl:0"
                                 % (a["step"], a["loss"], b["loss"]))
            self.assertLessEqual(en, 1e-4, "step %d: grad norm %r on cpu, %r on opencl:0"
                                 % (a["step"], a["grad_norm"], b["grad_norm"]))
        # Training happened: the loss went down.
        self.assertLess(ocl[-1]["loss"], ocl[0]["loss"])
        print("20 steps: worst loss rel %.3g, worst grad-norm rel %.3g; final loss cpu %.6f "
              "opencl %.6f" % (worst_loss, worst_norm, cpu[-1]["loss"], ocl[-1]["loss"]),
              file=sys.stderr)

    def test_compare_twenty_steps_with_cpu(self):
        """`trainyard compare --backends cpu,opencl:0`: every step's loss within
        1e-4 relative, CSV and plot written."""
        data = self.make_dataset()
        out = os.path.join(self.tmp, "compare")
        r = run(["compare", "--backends", "cpu,opencl:0", "--steps", "20", "--tolerance",
                 "1e-4", "--model", os.path.join(CFG.models, "gpt2"), "--data", data,
                 "--batch-size", "8", "--lr", "3e-3", "--warmup-steps", "2", "--dropout",
                 "0.1", "--out", out])
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        self.assertIn("max relative loss difference", r.stdout)
        self.assertTrue(os.path.getsize(os.path.join(out, "compare.svg")) > 0)
        with open(os.path.join(out, "compare.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([int(x["step"]) for x in rows], list(range(1, 21)))
        worst = 0.0
        for x in rows:
            loss_cpu, loss_ocl = float(x["loss_cpu"]), float(x["loss_opencl_0"])
            rel = abs(loss_cpu - loss_ocl) / abs(loss_cpu)
            self.assertLessEqual(rel, 1e-4, "step %s: %r vs %r" % (x["step"], loss_cpu, loss_ocl))
            worst = max(worst, rel)
        print("compare cpu,opencl:0: worst loss rel %.3g over 20 steps" % worst, file=sys.stderr)


def main():
    global CFG
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--models", required=True)
    args, rest = parser.parse_known_args()
    CFG = args
    data = devices_json()
    if "opencl" not in [b["name"] for b in data["backends"]]:
        why = [r["reason"] for r in data["rejected"] if r["name"] == "opencl"]
        print("SKIPPED: the opencl backend is not usable here: %s"
              % (why[0] if why else "the plugin was not found"))
        sys.exit(77)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
