#!/usr/bin/env python3
"""End-to-end tests of what `trainyard` promises about the user's data, with
real processes (Python standard library only):

- SignalTest: SIGTERM at random moments of training steps, in bursts, never
  corrupts the process (hundreds of signals; oneDNN's JIT GEMM kernels once
  turned a signal frame into heap corruption) and always ends in a whole
  checkpoint; SIGTERM while the console is a pipe whose reader is gone
  still saves (SIGPIPE no longer kills the run).
"""
import argparse
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

CFG = None


def run(args, env=None, **kw):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([CFG.trainyard] + args, capture_output=True, text=True, env=full_env,
                          timeout=300, **kw)


def make_ids_dataset(path, docs, seed=1, vocab=96, seq_len=16, val_fraction=0.15):
    """Learnable pre-tokenized documents: arithmetic progressions of ids."""
    rng = random.Random(seed)
    with open(path + ".jsonl", "w") as f:
        for _ in range(docs):
            start, step, n = rng.randrange(vocab - 6), rng.choice([1, 2, 3]), rng.randrange(8, 40)
            f.write(json.dumps([(start + i * step) % (vocab - 6) for i in range(n)]) + "\n")
    r = run(["data", "prepare", "--format", "ids", "--vocab-size", str(vocab), "--eos-id",
             str(vocab - 1), "--input", path + ".jsonl", "--seq-len", str(seq_len),
             "--val-fraction", str(val_fraction), "--out", path])
    assert r.returncode == 0, r.stderr
    return path


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ty_safety_test_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def train(self, *args, rc=0, env=None):
        r = run(["train"] + list(args), env=env)
        self.assertEqual(r.returncode, rc, r.stderr[-3000:])
        return r

    def start_train(self, args, **kw):
        return subprocess.Popen([CFG.trainyard, "train"] + list(args), text=True, **kw)

    def assert_whole_checkpoint(self, out):
        saved = glob.glob(os.path.join(out, "checkpoint-*"))
        self.assertEqual(len(saved), 1, saved)
        for name in ("config.json", "model.safetensors", "optimizer.safetensors",
                     "trainer_state.json"):
            self.assertTrue(os.path.exists(os.path.join(saved[0], name)), (saved[0], name))
        self.assertFalse(glob.glob(os.path.join(out, ".checkpoint-*")))
        return saved[0]


class SignalTest(Base):
    # A step dominated by large f32 matmuls (vocabulary 4096, 512 tokens
    # per step): the cpu backend's oneDNN GEMMs whose kernels once moved the
    # stack pointer onto the heap.
    def args(self, data, out):
        return ["--preset", "gpt2-tiny", "--data", data, "--out", out, "--backend", "cpu?threads=1",
                "--batch-size", "8", "--max-steps", "100000", "--eval-batches", "1",
                "--keep", "1"]

    def test_sigterm_bursts_mid_step_always_save(self):
        data = make_ids_dataset(os.path.join(self.tmp, "data"), 400, vocab=4096, seq_len=64,
                                val_fraction=0.05)
        seed = int(os.environ.get("TY_TEST_SEED", random.randrange(1 << 30)))
        print("SignalTest seed %d (TY_TEST_SEED=%d repeats it)" % (seed, seed))
        rng = random.Random(seed)
        runs, burst, sent = 12, 20, 0
        for i in range(runs):
            out = os.path.join(self.tmp, "run%d" % i)
            p = self.start_train(self.args(data, out), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)
            # The first step line: training is under way.
            for line in p.stderr:
                if line.startswith("Epoch"):
                    break
            time.sleep(rng.uniform(0, 0.02))
            for _ in range(burst):
                if p.poll() is not None:
                    break
                p.send_signal(signal.SIGTERM)
                sent += 1
                time.sleep(rng.uniform(0, 0.003))
            err = p.stderr.read()
            p.wait(timeout=120)
            self.assertEqual(p.returncode, 0, "run %d of seed %d: %s" % (i, seed, err[-2000:]))
            self.assertIn("SIGTERM received", err)
            self.assert_whole_checkpoint(out)
            shutil.rmtree(out)
        self.assertGreaterEqual(sent, runs * 2)

    def test_sigterm_through_a_closed_pipe_saves(self):
        data = make_ids_dataset(os.path.join(self.tmp, "data"), 60)
        out = os.path.join(self.tmp, "out")
        read_fd, write_fd = os.pipe()
        args = self.args(data, out)
        args[args.index("--batch-size") + 1] = "4"
        p = self.start_train(args, stdout=write_fd, stderr=write_fd,
                             env=dict(os.environ, TRAINYARD_DEBUG_STEP_SLEEP_MS="20"))
        os.close(write_fd)
        with os.fdopen(read_fd) as reader:
            for line in reader:
                if line.startswith("Epoch"):
                    break
        # The reader is gone (`train | tee log` with tee killed): every
        # console write now fails. Training goes on, and SIGTERM saves.
        time.sleep(0.3)
        self.assertIsNone(p.poll(), "the run died when its console went away")
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=120)
        self.assertEqual(p.returncode, 0)
        self.assert_whole_checkpoint(out)
        with open(os.path.join(out, "summary.txt")) as f:
            self.assertIn("steps:", f.read())


def main():
    global CFG
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--models", required=True, help="tests/fixtures/models")
    CFG, rest = parser.parse_known_args()
    program = unittest.main(argv=[sys.argv[0], "-v"] + rest, exit=False)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
