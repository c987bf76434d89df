#!/usr/bin/env python3
"""Cross-device resume (issue 34): a checkpoint written on one backend
resumes on another. The tiny GPT-2 fixture trains 4 steps on cpu, resumes to
step 8 on opencl (PoCL in CI), to 12 on dataflow (the emulated device, its
whole-step artifact path) and back to cpu to 16 (f32, constant learning
rate); every segment's step losses and the final weights must match an
uninterrupted cpu run of 16 steps within 1e-5 relative. A leg whose backend
cannot open here runs on cpu instead and the test ends skipped (exit 77)
naming it, after checking everything else; cpu and dataflow are in-tree, so
the test never passes by skipping everything. Standard library only."""
import json
import math
import os
import struct
import sys

import cli_util  # noqa: E402  (beside this file: run(), the temporary folder, main())
from cli_util import make_ids_dataset, run  # noqa: E402

TOLERANCE = 1e-5
LEGS = (("cpu", 4), ("opencl", 8), ("dataflow", 12), ("cpu", 16))
# TRAINYARD_TEST_RESUME_LEGS="cpu=4,cuda=8,cpu=12" picks other legs (the GPU
# machine's run: tests/cuda/device_run.sh numerics); the last leg's step is
# the run's length.
if os.environ.get("TRAINYARD_TEST_RESUME_LEGS"):
    LEGS = tuple((leg.split("=")[0], int(leg.split("=")[1]))
                 for leg in os.environ["TRAINYARD_TEST_RESUME_LEGS"].split(","))


def read_f32_tensors(path):
    """The F32 tensors of a safetensors file as lists of floats, by name."""
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        begin, end = info["data_offsets"]
        out[name] = struct.unpack("<%df" % ((end - begin) // 4), data[8 + n + begin:8 + n + end])
    return out


def relative_error(a, b):
    """||a - b|| / ||b||, the error of a whole tensor against the reference."""
    err = sum((x - y) ** 2 for x, y in zip(a, b))
    ref = sum(y * y for y in b)
    return math.sqrt(err / ref) if ref > 0 else math.sqrt(err)


def compared_parts(name, a, b):
    """The parts of a tensor the computation determines. GPT-2's key bias
    (the middle third of attn.c_attn.bias) is not one: softmax ignores a
    constant per row, so its gradient is exactly zero in exact arithmetic
    and each backend's rounding (~1e-9) is all it gets, which Adam then
    normalizes to steps of the learning rate's size. It (and its moments)
    holds each backend's rounding noise, ~1e-3 apart, while the loss cannot
    depend on it; the query and value thirds are compared."""
    if ".attn.c_attn.bias" not in name:
        return [(name, a, b)]
    third = len(b) // 3
    return [(name + " (query)", a[:third], b[:third]),
            (name + " (value)", a[2 * third:], b[2 * third:])]


class CrossDeviceResumeTest(cli_util.TempDirTest):
    def train(self, backend, steps, out, *extra):
        args = ["train", "--model", os.path.join(cli_util.CFG.models, "gpt2"), "--data",
                self.data, "--backend", backend, "--max-steps", str(steps), "--batch-size", "8",
                "--lr", "2e-3", "--schedule", "constant", "--seed", "5", "--log-every", "100",
                "--keep", "0", "--out", out] + list(extra)
        r = run(args, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        return r

    @staticmethod
    def losses(folder):
        with open(os.path.join(folder, "metrics.jsonl")) as f:
            rows = [json.loads(x) for x in f if '"loss"' in x]
        return {x["step"]: x["loss"] for x in rows}

    def test_resume_across_backends(self):
        self.data = make_ids_dataset(self.path("data"))
        devices = json.loads(run(["devices", "--json"]).stdout)
        usable = {b["name"] for b in devices["backends"] if b["devices"]}
        ref = self.path("ref")
        self.train("cpu", LEGS[-1][1], ref)
        ref_losses = self.losses(ref)
        self.assertEqual(sorted(ref_losses), list(range(1, LEGS[-1][1] + 1)))
        skipped, previous, first = [], None, 1
        for k, (backend, steps) in enumerate(LEGS):
            ran_on = backend
            if backend not in usable:
                skipped.append("%s (steps %d-%d): no usable %s device here" %
                               (backend, first, steps, backend))
                ran_on = "cpu"
            out = self.path("leg%d-%s" % (k, ran_on))
            extra = ["--resume", previous] if previous else []
            r = self.train(ran_on, steps, out, *extra)
            if ran_on == "dataflow":
                # The whole train step as one compiled artifact (the cache's).
                self.assertRegex(r.stderr, r"train step: (miss|hit)")
            if previous:
                self.assertIn("resuming from %s at step %d" % (previous, first - 1), r.stderr)
            losses = self.losses(out)
            self.assertEqual(sorted(losses), list(range(first, steps + 1)), out)
            worst = max(abs(losses[s] - ref_losses[s]) / abs(ref_losses[s]) for s in losses)
            print("leg %d, %s, steps %d-%d: worst relative loss difference %.3e" %
                  (k, ran_on, first, steps, worst), file=sys.stderr)
            self.assertLessEqual(worst, TOLERANCE, (ran_on, losses, ref_losses))
            previous, first = os.path.join(out, "checkpoint-%d" % steps), steps + 1
        # The final weights and optimizer moments, tensor by tensor.
        for name in ("model.safetensors", "optimizer.safetensors"):
            got = read_f32_tensors(os.path.join(previous, name))
            want = read_f32_tensors(os.path.join(ref, "checkpoint-%d" % LEGS[-1][1], name))
            self.assertEqual(sorted(got), sorted(want), name)
            errors = []
            for t in want:
                for part, a, b in compared_parts(t, got[t], want[t]):
                    errors.append((relative_error(a, b), part))
            worst = max(errors)
            print("final %s: worst relative tensor error %.3e (%s)" % (name, worst[0], worst[1]),
                  file=sys.stderr)
            self.assertLessEqual(worst[0], TOLERANCE, name)
        if skipped:
            self.skipTest("legs run on cpu instead: " + "; ".join(skipped))


if __name__ == "__main__":
    sys.exit(cli_util.main("--models"))
