#!/usr/bin/env python3
"""The opencl backend end to end, through the `trainyard` command (Python
standard library only). The checks every device backend passes live in
backend_cli.py (conform, forward, generate, train, mixed precision); this
file adds the opencl-specific ones and runs them all on opencl:0.

- ConformTest: `trainyard conform --backend opencl:0` passes every case of
  every op of op set v1, forward and backward, in f32, bf16 and f16 (and
  the integer cases): nothing fails, and nothing is unsupported except the
  memory levers' ops, refused by name (MEMORY_LEVER_OPS: no OpenCL kernels
  for the fused loss, Adafactor and the norm pass yet).
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
import os
import sys
import tempfile
import unittest

from backend_cli import (CFG, ATTENTION_MERGE_OPS, COLLECTIVE_OPS, VOCAB_PARALLEL_OPS, MEMORY_LEVER_OPS, ConformTest, ForwardTest, GenerateTest,  # noqa: F401
                         MixedPrecisionTest,
                         TrainTest, devices_json, parse_common, run, skip_unless_usable)

# 0, 1 or 77 (skipped) for ctest (tests/common/unittest_exit.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import unittest_exit  # noqa: E402


# opencl has no kernels for the memory levers' ops nor the collectives yet:
# refused by name.
CFG.refused_ops = MEMORY_LEVER_OPS | COLLECTIVE_OPS | VOCAB_PARALLEL_OPS | ATTENTION_MERGE_OPS


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



def main():
    rest = parse_common(sys.argv[1:] + ["--backend", "opencl:0"])
    skip_unless_usable()
    sys.exit(unittest_exit.run([sys.argv[0]] + rest))


if __name__ == "__main__":
    main()
