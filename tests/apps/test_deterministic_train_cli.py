#!/usr/bin/env python3
"""End-to-end tests of `trainyard train --deterministic` (issue 34) under
Open MPI's mpirun on the cpu backend (Python standard library only).

- MatchTest: with the same global batch of 4 rows, one process of batch 4,
  2 ranks of batch 2, 4 ranks of batch 1, one process of batch 1 x
  accumulation 4 and 2 ranks of batch 1 x accumulation 2 train the tiny
  GPT-2 for 20 steps to the same bits: every step's loss and gradient norm
  in metrics.jsonl equal (==), and the final weights byte for byte; the
  tiny Llama, one process against 2 ranks, the same. --check-numerics
  (every step, and every:4) keeps working and changes no bit.
- DropoutTest: with dropout 0.1 the masks follow the rows: one process,
  2 and 4 ranks equal bitwise (and differ from the run without dropout).
- ResumeTest: a run stopped at step 10 and resumed on 2 ranks gives the
  bits of the uninterrupted one-process run.
- TcpTest: 2 ranks launched without MPI (torchrun's variables, the TCP
  transport) equal one process bitwise.
- DeviceTreeTest: the rows' tree on the device (train_tree_dev.c, the
  default) against the host tree (TRAINYARD_DEBUG_DET_HOST_TREE=1): the
  same bits for 7 rows (three partials to fold), 3 x 2 rows, 1 row, and 2
  ranks of 2 x 2 and of 1 row; each run's start-up line names its path; a
  mixed run (template?fallback=cpu) keeps the host tree and says so.
- RefuseTest: 2 ranks of batch 3 (3 rows a rank, not a power of two),
  --zero, --tp, --pp, --fused-optimizer, --artifact with --deterministic: refused with a
  message, --out untouched.

Without mpirun or the MPI shim the suite exits 77 (skipped) and says why.
"""
import argparse
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import unittest

import cli_util
from test_distributed_cli import mpi_missing  # noqa: E402 (beside this file)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import unittest_exit  # noqa: E402

CFG = None
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
BACKEND = "cpu?threads=1"


def rank_env():
    env = dict(os.environ)
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    # LeakSanitizer cannot tell Open MPI's leftovers from ours in a rank
    # (test_distributed_cli.py says why); ASan and UBSan still check.
    if "ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] = env["ASAN_OPTIONS"].replace("detect_leaks=1", "detect_leaks=0")
    return env


def curve(out):
    """[(step, loss, grad_norm)] of metrics.jsonl, every step."""
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [(m["step"], m["loss"], m["grad_norm"]) for m in rows if "loss" in m]


def tensors(path):
    """{name: (dtype, shape, raw bytes)} of a safetensors file; the header's
    __metadata__ (the run id) is left out."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


class Base(unittest.TestCase):
    model = "gpt2"

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ty_det_test_")
        self.data = cli_util.make_ids_dataset(os.path.join(self.tmp, "data"), docs=80,
                                              val_fraction=None)
        self.common = ["--model", os.path.join(CFG.models, self.model), "--data", self.data,
                       "--lr", "2e-3", "--backend", BACKEND, "--log-every", "100",
                       "--cache-dir", os.path.join(self.tmp, "cache"), "--deterministic"]

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def train(self, n, *args, rc=0, env=None):
        cmd = [CFG.trainyard, "train"] + self.common + list(args)
        if n:
            cmd = MPIRUN + ["-np", str(n)] + cmd
        run_env = rank_env()
        run_env.update(env or {})
        r = subprocess.run(cmd, capture_output=True, text=True, env=run_env, timeout=300)
        if rc == "fail":
            self.assertNotEqual(r.returncode, 0, (r.stdout + r.stderr)[-3000:])
        else:
            self.assertEqual(r.returncode, rc, (r.stdout + r.stderr)[-3000:])
        return r

    def assert_same_bits(self, a, b, step):
        ca, cb = curve(a), curve(b)
        self.assertEqual(len(ca), step)
        self.assertEqual(ca, cb, "%s vs %s" % (a, b))  # floats compared with ==
        ta = tensors(os.path.join(a, "checkpoint-%d" % step, "model.safetensors"))
        tb = tensors(os.path.join(b, "checkpoint-%d" % step, "model.safetensors"))
        self.assertEqual(sorted(ta), sorted(tb))
        for name in ta:
            self.assertEqual(ta[name], tb[name], "%s: %s vs %s" % (name, a, b))


class MatchTest(Base):
    def test_splits_of_one_global_batch(self):
        steps = ["--max-steps", "20"]
        one = self.path("one")
        r = self.train(0, *steps, "--out", one, "--batch-size", "4")
        self.assertIn("deterministic: on; 4 rows per step (4 per rank x 1 rank)", r.stderr)
        runs = [(2, ["--batch-size", "2"]), (4, ["--batch-size", "1"]),
                (0, ["--batch-size", "1", "--grad-accum", "4"]),
                (2, ["--batch-size", "1", "--grad-accum", "2"])]
        for k, (n, split) in enumerate(runs):
            out = self.path("split%d" % k)
            r = self.train(n, *steps, "--out", out, *split)
            if n:
                self.assertEqual(r.stderr.count("deterministic: on;"), 1, r.stderr)  # rank 0
                self.assertIn("the ranks' partials gathered over the host transport", r.stderr)
            self.assert_same_bits(one, out, 20)

    def test_check_numerics_keeps_working(self):
        # its checked session is the same batch-1 gradient graph: the same bits
        steps = ["--max-steps", "6", "--batch-size", "4"]
        plain, checked, sampled = self.path("plain"), self.path("checked"), self.path("sampled")
        self.train(0, *steps, "--out", plain)
        r = self.train(0, *steps, "--out", checked, "--check-numerics")
        self.assertIn("check-numerics: every step runs with its", r.stderr)
        self.train(0, *steps, "--out", sampled, "--check-numerics=every:4")
        self.assert_same_bits(plain, checked, 6)
        self.assert_same_bits(plain, sampled, 6)

    def test_llama(self):
        self.common[1] = os.path.join(CFG.models, "llama")
        steps = ["--max-steps", "10"]
        one, two = self.path("one"), self.path("two")
        self.train(0, *steps, "--out", one, "--batch-size", "4")
        self.train(2, *steps, "--out", two, "--batch-size", "2")
        self.assert_same_bits(one, two, 10)


class DropoutTest(Base):
    def test_masks_follow_rows(self):
        steps = ["--max-steps", "10", "--batch-size", "4"]
        drop = ["--dropout", "0.1"]
        one, plain = self.path("one"), self.path("plain")
        self.train(0, *steps, *drop, "--out", one)
        self.train(0, *steps, "--out", plain)
        for n, bs in ((2, "2"), (4, "1")):
            out = self.path("np%d" % n)
            self.train(n, "--max-steps", "10", "--batch-size", bs, *drop, "--out", out)
            self.assert_same_bits(one, out, 10)
        # dropout was on: without it the curve is another one
        self.assertNotEqual([c[1] for c in curve(one)], [c[1] for c in curve(plain)])


class ResumeTest(Base):
    def test_stopped_and_resumed_on_two_ranks(self):
        args = ["--schedule", "constant", "--save-every", "10", "--keep", "0"]
        ref, part = self.path("ref"), self.path("part")
        self.train(0, *args, "--max-steps", "20", "--out", ref, "--batch-size", "4")
        self.train(0, *args, "--max-steps", "10", "--out", part, "--batch-size", "4")
        self.train(2, *args, "--max-steps", "20", "--out", part, "--batch-size", "2",
                   "--resume", "latest")
        self.assert_same_bits(ref, part, 20)
        # a resume that drops the flag says so (from there the sums round otherwise)
        self.common.remove("--deterministic")
        r = self.train(0, *args, "--max-steps", "22", "--out", part, "--batch-size", "4",
                       "--resume", "latest")
        self.assertIn("note: --deterministic is false; the run being resumed used true", r.stderr)


class TcpTest(Base):
    def test_env_launch_matches_one_process(self):
        # the partials' gather over the TCP transport (a launch without MPI)
        steps = ["--max-steps", "10"]
        one, two = self.path("one"), self.path("two")
        self.train(0, *steps, "--out", one, "--batch-size", "4")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = []
        for r in range(2):
            env = rank_env()
            for k in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE"):
                env.pop(k, None)
            env.update({"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                        "TRAINYARD_JOB_TOKEN": "ty-deterministic-test-token"})
            procs.append(subprocess.Popen([CFG.trainyard, "train"] + self.common + steps +
                                          ["--out", two, "--batch-size", "2"], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        for p in procs:
            out, err = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 0, err[-3000:])
        self.assert_same_bits(one, two, 10)


class DeviceTreeTest(Base):
    def test_device_tree_equals_host_tree(self):
        host = {"TRAINYARD_DEBUG_DET_HOST_TREE": "1"}
        splits = [(0, ["--batch-size", "7"]), (0, ["--batch-size", "3", "--grad-accum", "2"]),
                  (0, ["--batch-size", "1"]), (2, ["--batch-size", "2", "--grad-accum", "2"]),
                  (2, ["--batch-size", "1"])]
        for k, (n, split) in enumerate(splits):
            dev, ref = self.path("dev%d" % k), self.path("host%d" % k)
            r = self.train(n, "--max-steps", "6", "--out", dev, *split)
            self.assertIn("summed on the device in one fixed binary-counter tree", r.stderr)
            r = self.train(n, "--max-steps", "6", "--out", ref, *split, env=host)
            self.assertIn("(the host tree: TRAINYARD_DEBUG_DET_HOST_TREE is set)", r.stderr)
            self.assert_same_bits(dev, ref, 6)

    def test_mixed_run_keeps_the_host_tree(self):
        # a mixed session's state is split over two devices: the host tree
        r = self.train(0, "--max-steps", "2", "--out", self.path("mixed"), "--batch-size", "3",
                       "--backend", "template?fallback=cpu")
        self.assertIn("(the host tree: a mixed run (fallback=) keeps it on the host)", r.stderr)


class RefuseTest(Base):
    def refused(self, n, args, message, rc):
        out = self.path("refused")
        r = self.train(n, "--max-steps", "2", "--out", out, *args, rc=rc)
        self.assertIn(message, r.stderr)
        self.assertFalse(os.path.exists(out), "a refused run left %s" % out)

    def test_refusals(self):
        self.refused(2, ["--batch-size", "3"],
                     "--deterministic on 2 ranks: --batch-size 3 x --grad-accum 1 = 3 rows per "
                     "rank, not a power of two", "fail")
        self.refused(2, ["--batch-size", "1", "--grad-accum", "3"],
                     "--batch-size 1 x --grad-accum 3 = 3 rows per rank", "fail")
        self.refused(2, ["--batch-size", "2", "--zero", "1"],
                     "--deterministic does not cover --zero", "fail")
        self.refused(2, ["--batch-size", "2", "--tp", "2"],
                     "--deterministic does not cover --tp", "fail")
        self.refused(0, ["--batch-size", "2", "--fused-optimizer"],
                     "--deterministic does not cover --fused-optimizer", 2)
        self.refused(2, ["--batch-size", "2", "--pp", "2"],
                     "--deterministic does not cover --pp", "fail")
        self.refused(0, ["--batch-size", "2", "--artifact", self.path("step.tyart")],
                     "--deterministic does not cover --artifact", 2)
        # one process has no subtree to keep whole: 3 rows are fine
        self.train(0, "--max-steps", "2", "--out", self.path("three"), "--batch-size", "3")


def main():
    global CFG
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--models", required=True, help="tests/fixtures/models")
    parser.add_argument("--mpi-shim", required=True, help="the build's libty_mpi.so")
    CFG, rest = parser.parse_known_args()
    cli_util.CFG = CFG
    missing = mpi_missing(CFG)
    if missing:
        print("SKIPPED: " + missing)
        return 77
    program = unittest.main(argv=[sys.argv[0], "-v"] + rest, exit=False)
    return unittest_exit.exit_code(program.result)


if __name__ == "__main__":
    sys.exit(main())
