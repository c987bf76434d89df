#!/usr/bin/env python3
"""End-to-end tests of the emulated dataflow accelerator through `trainyard`
(Python standard library only).

- CompareTest: `trainyard compare --backends cpu,dataflow` on the tiny GPT-2
  and Llama fixtures for 20 steps, with dropout on and masked chat-style
  data (ids with per-target weights; the data's short last batch is padded
  with a zero loss-gradient seed): every step's loss agrees within 1e-5
  relative; compare.csv and compare.svg exist and hold what they should.
- ResumeTest: a dataflow run resumed from a checkpoint (loading its train
  step from an artifact) matches an uninterrupted one bit for bit.
- CompileTest: `trainyard compile` prints and writes the placement report
  (emulated, simulated figures apart from host wall time); a second compile
  is a cache hit; two processes compiling the same key at once both succeed
  and leave one entry; a flipped byte, a truncation or an edited target of
  the artifact is refused by `train --artifact` (DATA_LOSS /
  FAILED_PRECONDITION), as are another batch size, other dropout and an
  inference artifact asked to train; failures are cached until
  --retry-failed; bad usage exits 2.
"""
import argparse
import csv
import glob
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

import cli_util  # noqa: E402  (beside this file)
from cli_util import make_chat_ids  # noqa: E402

# 0, 1 or 77 (skipped) for ctest (tests/common/unittest_exit.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import unittest_exit  # noqa: E402

CFG = None


def run(args, env=None, **kw):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([CFG.trainyard] + args, capture_output=True, text=True, env=full_env,
                          timeout=300, **kw)


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ty_dataflow_test_")
        # Never the user's ~/.cache: every run gets this test's own cache.
        self.env = {"XDG_CACHE_HOME": os.path.join(self.tmp, "xdg")}

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def ty(self, *args, rc=0, env=None):
        full = dict(self.env)
        full.update(env or {})
        r = run(list(args), env=full)
        self.assertEqual(r.returncode, rc, (args, r.stdout[-2000:], r.stderr[-3000:]))
        return r

    def model(self, family):
        return os.path.join(CFG.models, family)


class CompareTest(Base):
    def check(self, family):
        data = make_chat_ids(os.path.join(self.tmp, "data"), 60)
        out = os.path.join(self.tmp, "cmp-" + family)
        r = self.ty("compare", "--backends", "cpu,dataflow", "--model", self.model(family),
                    "--data", data, "--steps", "20", "--batch-size", "8", "--dropout", "0.1",
                    "--lr", "2e-3", "--warmup-steps", "2", "--out", out)
        self.assertIn("max relative loss difference", r.stdout)
        self.assertIn("(cost model, not host time): estimated cycles per step:", r.stdout)
        self.assertIn("emulated DRAM peak", r.stdout)
        with open(os.path.join(out, "compare.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([int(x["step"]) for x in rows], list(range(1, 21)))
        worst = 0.0
        for x in rows:
            a, b = float(x["loss_cpu"]), float(x["loss_dataflow"])
            rel = abs(a - b) / abs(a)
            self.assertLessEqual(rel, 1e-5, x)
            self.assertAlmostEqual(rel, float(x["rel_diff_dataflow"]), delta=1e-12)
            worst = max(worst, rel)
            self.assertGreater(float(x["tokens_per_s_dataflow"]), 0)
        # Dropout was on and the weights masked: the runs trained, and the
        # loss moved (a constant loss would agree trivially).
        losses = [float(x["loss_cpu"]) for x in rows]
        self.assertGreater(max(losses) - min(losses), 0.05)
        for d in ("1-cpu", "2-dataflow"):
            with open(os.path.join(out, d, "train_config.json")) as f:
                self.assertEqual(json.load(f)["dropout"], 0.1)
        with open(os.path.join(out, "2-dataflow", "device_report.txt")) as f:
            self.assertIn("EMULATED device", f.read())
        svg = ET.parse(os.path.join(out, "compare.svg")).getroot()
        ns = "{http://www.w3.org/2000/svg}"
        self.assertEqual(len(svg.findall(ns + "polyline")), 3)  # two curves, one diff line
        text = " ".join(t.text or "" for t in svg.iter(ns + "text"))
        for needle in ("cpu (reference)", "dataflow", "tolerance 1e-05", "step",
                       "relative loss difference"):
            self.assertIn(needle, text)
        return worst

    def test_gpt2(self):
        self.check("gpt2")

    def test_llama(self):
        self.check("llama")

    def test_tolerance_and_usage(self):
        data = make_chat_ids(os.path.join(self.tmp, "data"), 30)
        base = ["compare", "--model", self.model("gpt2"), "--data", data, "--out",
                os.path.join(self.tmp, "c")]
        for args, needle in ((["--steps", "2"], "--backends URI,URI is required"),
                             (["--backends", "cpu", "--steps", "2"], "two or more URIs"),
                             (["--backends", "cpu,dataflow"], "--steps N is required"),
                             (["--backends", "cpu,dataflow", "--steps", "2", "--max-steps", "3"],
                              "--max-steps is set by compare"),
                             (["--backends", "cpu,dataflow", "--steps", "x"], "not a positive")):
            r = self.ty(*(base + args), rc=2)
            self.assertIn(needle, r.stderr)
        # A run that fails names its backend and shows the end of its log.
        r = self.ty(*(base + ["--backends", "cpu,dataflow", "--steps", "2", "--grad-accum",
                              "2", "--batch-size", "4"]), rc=1)
        self.assertIn("the run on dataflow failed", r.stderr)
        self.assertIn("gradient accumulation across calls is not a whole step", r.stderr)


class ResumeTest(Base):
    def common(self, data, out):
        return ["train", "--model", self.model("gpt2"), "--data", data, "--out", out,
                "--backend", "dataflow", "--max-steps", "16", "--batch-size", "8", "--lr",
                "2e-3", "--dropout", "0.1", "--keep", "0", "--log-every", "100", "--seed", "5"]

    def test_resume_is_bit_identical(self):
        data = make_chat_ids(os.path.join(self.tmp, "data"), 40)
        a, b = os.path.join(self.tmp, "a"), os.path.join(self.tmp, "b")
        self.ty(*self.common(data, a), "--save-every", "8")
        art = os.path.join(self.tmp, "step.tyart")
        r = self.ty("compile", "--backend", "dataflow", "--model", self.model("gpt2"), "--data",
                    data, "--batch-size", "8", "--dropout", "0.1", "--out", art)
        r = self.ty(*self.common(data, b), "--resume", os.path.join(a, "checkpoint-8"),
                    "--artifact", art)
        self.assertIn("resuming from", r.stderr)
        self.assertIn("train step: loaded from an artifact", r.stderr)
        for name in ("model.safetensors", "optimizer.safetensors"):
            self.assertEqual(cli_util.checkpoint_bytes(os.path.join(b, "checkpoint-16", name)),
                             cli_util.checkpoint_bytes(os.path.join(a, "checkpoint-16", name)),
                             name)

        def losses(d):
            with open(os.path.join(d, "metrics.jsonl")) as f:
                return [json.loads(x)["loss"] for x in f if '"loss"' in x]
        self.assertEqual(losses(b), losses(a)[8:])


class CompileTest(Base):
    def compile(self, out, *extra, rc=0, env=None):
        return self.ty("compile", "--backend", "dataflow", "--model", self.model("gpt2"),
                       "--batch-size", "8", "--seq-len", "16", "--out", out, *extra, rc=rc,
                       env=env)

    def entries(self, suffix=".art"):
        return glob.glob(os.path.join(self.tmp, "xdg", "trainyard", "compile-v1", "dataflow",
                                      "*" + suffix))

    def test_report_and_cache_hit(self):
        art = os.path.join(self.tmp, "a.tyart")
        r = self.compile(art)
        for needle in ("an EMULATED device", "dataflow placement report", "sections (static "
                       "schedule, in order)", "FWD", "BWD", "GRADNORM", "OPT", "tiles used: ",
                       "on-chip", "estimated cycles per step:", "host wall time of the compile:",
                       "not a simulated figure", "compile cache: miss", "runtime "
                       "hyperparameters (inputs, never recompiled): lr, weight_decay, max_norm, "
                       "beta1, beta2, eps, step"):
            self.assertIn(needle, r.stdout)
        with open(art + ".report.txt") as f:
            self.assertIn("estimated cycles per step:", f.read())
        with open(art, "rb") as f:
            self.assertEqual(f.read(8), b"TYDFART\0")
        self.assertEqual(len(self.entries()), 1)
        r = self.compile(os.path.join(self.tmp, "b.tyart"))
        self.assertIn("compile cache: hit", r.stdout)
        with open(art, "rb") as f, open(os.path.join(self.tmp, "b.tyart"), "rb") as g:
            self.assertEqual(f.read(), g.read())
        r = self.compile(os.path.join(self.tmp, "c.tyart"), "--cache-dir", "none")
        self.assertIn("compile cache: compiled (no cache folder)", r.stdout)

    def test_concurrent_compiles_leave_one_entry(self):
        procs = []
        env = dict(os.environ, **self.env)
        for i in range(2):
            procs.append(subprocess.Popen(
                [CFG.trainyard, "compile", "--backend", "dataflow", "--preset", "gpt2-tiny",
                 "--vocab-size", "300", "--batch-size", "4", "--seq-len", "32", "--out",
                 os.path.join(self.tmp, "p%d.tyart" % i)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
        for p in procs:
            out, err = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 0, err)
        self.assertEqual(len(self.entries()), 1)
        folder = os.path.dirname(self.entries()[0])
        self.assertEqual([n for n in os.listdir(folder) if n.startswith(".")], [])
        with open(os.path.join(self.tmp, "p0.tyart"), "rb") as f, \
                open(os.path.join(self.tmp, "p1.tyart"), "rb") as g:
            self.assertEqual(f.read(), g.read())

    def train_with(self, art, *extra, rc=1):
        data = os.path.join(self.tmp, "data")
        if not os.path.exists(data):
            make_chat_ids(data, 20)
        # A fresh run folder each time: a fresh run refuses one that holds a run.
        out = tempfile.mkdtemp(prefix="t", dir=self.tmp)
        return self.ty("train", "--model", self.model("gpt2"), "--data", data, "--out",
                       out, "--backend", "dataflow", "--max-steps", "1",
                       "--batch-size", "8", "--artifact", art, *extra, rc=rc)

    def test_corrupt_truncated_or_retargeted_artifacts(self):
        art = os.path.join(self.tmp, "a.tyart")
        self.compile(art)
        self.train_with(art, rc=0)
        with open(art, "rb") as f:
            good = bytearray(f.read())

        def refused(data, code, needle):
            bad = os.path.join(self.tmp, "bad.tyart")
            with open(bad, "wb") as f:
                f.write(data)
            r = self.train_with(bad)
            self.assertIn(code, r.stderr)
            self.assertIn(needle, r.stderr)

        flipped = bytearray(good)
        flipped[len(good) // 2] ^= 0x01
        refused(flipped, "DATA_LOSS", "content hash does not match")
        refused(good[:-7], "DATA_LOSS", "content hash does not match")
        refused(good[:20], "DATA_LOSS", "the artifact is truncated")
        # The target edited (tiles at byte 56), with the content hash redone as
        # a tool would: the device is another target.
        edited = bytearray(good)
        struct.pack_into("<I", edited, 56, 1)
        refused(edited, "DATA_LOSS", "content hash does not match")
        edited[16:48] = hashlib.sha256(bytes(edited[48:])).digest()
        refused(edited, "FAILED_PRECONDITION", "target mismatch: the artifact was compiled for "
                "tiles=1")

    def test_mismatches_need_a_recompile(self):
        art = os.path.join(self.tmp, "a.tyart")
        self.compile(art)
        r = self.train_with(art, "--batch-size", "4")
        self.assertIn("FAILED_PRECONDITION", r.stderr)
        self.assertIn("'tokens' is i64[8,16] in the artifact and i64[4,16] in this run", r.stderr)
        self.assertIn("needs a recompile", r.stderr)
        r = self.train_with(art, "--dropout", "0.1")
        self.assertIn("dropout p (fixed at compile time) is 0 in the artifact and 0.1", r.stderr)
        inf = os.path.join(self.tmp, "inf.tyart")
        r = self.compile(inf, "--inference")
        self.assertIn("(inference graph)", r.stdout)
        r = self.train_with(inf)
        self.assertIn("an inference artifact asked to train", r.stderr)
        other = os.path.join(self.tmp, "t2.tyart")
        self.ty("compile", "--backend", "dataflow?tiles=2", "--model", self.model("gpt2"),
                "--batch-size", "8", "--seq-len", "16", "--out", other)
        r = self.train_with(other)
        self.assertIn("target mismatch", r.stderr)

    def test_failures_are_cached_until_retry(self):
        args = ("--grad-accum", "2")
        r = self.compile(os.path.join(self.tmp, "x.tyart"), *args, rc=1)
        self.assertIn("outside an optimizer update", r.stderr)
        self.assertNotIn("cached compile failure", r.stderr)
        self.assertEqual(len(self.entries(".fail")), 1)
        r = self.compile(os.path.join(self.tmp, "x.tyart"), *args, rc=1)
        self.assertIn("a cached compile failure", r.stderr)
        self.assertIn("--retry-failed", r.stderr)
        r = self.compile(os.path.join(self.tmp, "x.tyart"), *args, "--retry-failed", rc=1)
        self.assertNotIn("cached compile failure", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x.tyart")))

    def test_usage(self):
        out = os.path.join(self.tmp, "u.tyart")
        for args, needle in (
            (["--backend", "dataflow", "--out", out], "exactly one of --model and --preset"),
            (["--backend", "dataflow", "--preset", "gpt2-tiny", "--seq-len", "8", "--out", out],
             "--preset needs --vocab-size"),
            (["--backend", "dataflow", "--model", self.model("gpt2"), "--out", out],
             "--seq-len T is required"),
            (["--backend", "dataflow", "--model", self.model("gpt2"), "--seq-len", "8",
              "--lr", "1e-3", "--out", out], "--lr is a runtime hyperparameter"),
            (["--model", self.model("gpt2"), "--seq-len", "8", "--out", out],
             "--backend URI is required"),
        ):
            r = self.ty("compile", *args, rc=2)
            self.assertIn(needle, r.stderr)
        r = self.ty("compile", "--backend", "cpu", "--model", self.model("gpt2"), "--seq-len",
                    "8", "--out", out, rc=1)
        self.assertIn("cpu compiles only in process", r.stderr)
        r = self.ty("compile", "--backend", "dataflow?tiles=3", "--model", self.model("gpt2"),
                    "--seq-len", "8", "--out", out, rc=1)
        self.assertIn("option tiles='3' must be 1, 2 or 4", r.stderr)
        r = self.ty("compile", "--help")
        self.assertIn("--inference", r.stdout)
        r = self.ty("compare", "--help")
        self.assertIn("--backends", r.stdout)


def main():
    global CFG
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--models", required=True, help="tests/fixtures/models")
    CFG, rest = parser.parse_known_args()
    cli_util.CFG = CFG  # cli_util.make_chat_ids runs trainyard through it
    program = unittest.main(argv=[sys.argv[0], "-v"] + rest, exit=False)
    return unittest_exit.exit_code(program.result)


if __name__ == "__main__":
    sys.exit(main())
