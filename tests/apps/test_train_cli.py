#!/usr/bin/env python3
"""End-to-end tests of `trainyard train` (Python standard library; the
checks that read safetensors or TensorBoard files use those packages and are
skipped, with the reason, when they are missing).

- FineTuneTest: the tiny Hugging Face fixtures (gpt2, llama) fine-tuned for
  50 steps lower train and validation loss; the final checkpoint loads in
  `trainyard forward` and holds exactly the fixture's names, shapes and
  dtypes; metrics.jsonl, TensorBoard events and summary.txt are written.
- ResumeTest: 40 steps straight and 20 + resume + 20 give bit-identical
  weights and optimizer state, across epoch boundaries (reshuffled) with
  dropout on; also when the first run is stopped by SIGTERM.
- SafetyTest: SIGKILL during a checkpoint write keeps the previous one whole
  and resumable; a NaN stops with an error naming the step and writes no
  checkpoint; bad usage exits 2.
- ChatTest: with masked prompts the reported loss is the weighted mean.
- PositionsTest: --max-positions trains a preset on rows longer than its
  positions (config.json says the new count; a resume keeps it); refused
  with --model, out of range, and changed across a resume.
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

# 0, 1 or 77 (skipped) for ctest (tests/common/unittest_exit.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import unittest_exit  # noqa: E402

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


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def read_bytes(path):
    """A file's bytes; a safetensors file's without its run's random id
    (cli_util.checkpoint_bytes), so that two runs' checkpoints compare."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cli_util  # noqa: E402
    return cli_util.checkpoint_bytes(path)


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ty_train_test_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def train(self, *args, rc=0, env=None):
        r = run(["train"] + list(args), env=env)
        self.assertEqual(r.returncode, rc, r.stderr[-3000:])
        return r


class FineTuneTest(Base):
    def check_family(self, family):
        data = make_ids_dataset(os.path.join(self.tmp, "data"), 300)
        out = os.path.join(self.tmp, "out-" + family)
        model = os.path.join(CFG.models, family)
        r = self.train("--model", model, "--data", data, "--out", out, "--max-steps", "50",
                       "--batch-size", "8", "--lr", "3e-3", "--warmup-steps", "5",
                       "--eval-every", "10", "--log-every", "10")
        self.assertIn("resolved configuration", r.stderr)
        rows = metrics(out)
        train = [m["loss"] for m in rows if "loss" in m]
        val = [m["val_loss"] for m in rows if "val_loss" in m]
        self.assertEqual(len(train), 50)
        self.assertEqual(len(val), 5)
        self.assertLess(sum(train[-10:]) / 10, sum(train[:10]) / 10 - 0.3)
        self.assertLess(val[-1], val[0] - 0.3)
        for m in rows:
            if "loss" in m:
                for key in ("step", "lr", "grad_norm", "tokens_per_s"):
                    self.assertIn(key, m)
        ckpt = os.path.join(out, "checkpoint-50")
        for name in ("config.json", "model.safetensors", "optimizer.safetensors",
                     "trainer_state.json"):
            self.assertTrue(os.path.exists(os.path.join(ckpt, name)), name)
        with open(os.path.join(out, "summary.txt")) as f:
            summary = f.read()
        for needle in ("final train loss", "final val loss", "throughput", "peak host memory",
                       "backend: cpu"):
            self.assertIn(needle, summary)
        # The checkpoint loads in `trainyard forward`.
        tokens = os.path.join(self.tmp, "tokens.json")
        with open(tokens, "w") as f:
            json.dump([[1, 4, 7, 10, 13, 16]], f)
        fwd = os.path.join(self.tmp, "fwd.safetensors")
        r = run(["forward", "--model", ckpt, "--tokens", tokens, "--out", fwd])
        self.assertEqual(r.returncode, 0, r.stderr)
        return ckpt, out

    def check_names(self, ckpt, family):
        try:
            from safetensors import safe_open
        except ImportError:
            self.skipTest("the safetensors Python package is not installed")
        def table(path):
            with safe_open(path, "np") as f:
                return {k: (f.get_slice(k).get_shape(), f.get_slice(k).get_dtype())
                        for k in f.keys()}
        ours = table(os.path.join(ckpt, "model.safetensors"))
        theirs = table(os.path.join(CFG.models, family, "model.safetensors"))
        self.assertEqual(ours, theirs)

    def check_tensorboard(self, out):
        try:
            from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        except ImportError:
            self.skipTest("the tensorboard Python package is not installed")
        acc = EventAccumulator(os.path.join(out, "tensorboard"))
        acc.Reload()
        self.assertEqual([e.step for e in acc.Scalars("train/loss")], list(range(1, 51)))
        self.assertEqual(len(acc.Scalars("val/loss")), 5)

    def test_gpt2(self):
        ckpt, out = self.check_family("gpt2")
        self.check_names(ckpt, "gpt2")
        self.check_tensorboard(out)

    def test_llama(self):
        ckpt, _ = self.check_family("llama")
        self.check_names(ckpt, "llama")


class ResumeTest(Base):
    def common(self, data):
        # 60 documents: about 11 steps per epoch, so 40 steps cross three
        # epoch boundaries (each reshuffles); dropout draws masks per step.
        return ["--model", os.path.join(CFG.models, "gpt2"), "--data", data,
                "--max-steps", "40", "--batch-size", "8", "--lr", "2e-3", "--warmup-steps", "4",
                "--dropout", "0.1", "--keep", "0", "--log-every", "100", "--seed", "7"]

    def test_resume_is_bit_identical(self):
        data = make_ids_dataset(os.path.join(self.tmp, "data"), 60)
        a, b = os.path.join(self.tmp, "a"), os.path.join(self.tmp, "b")
        self.train(*self.common(data), "--out", a, "--save-every", "20")
        with open(os.path.join(a, "checkpoint-20", "trainer_state.json")) as f:
            state = json.load(f)
        self.assertGreaterEqual(state["epoch"], 1)  # already past an epoch boundary
        r = self.train(*self.common(data), "--out", b, "--resume",
                       os.path.join(a, "checkpoint-20"))
        self.assertIn("resuming from", r.stderr)
        for name in ("model.safetensors", "optimizer.safetensors"):
            self.assertEqual(read_bytes(os.path.join(a, "checkpoint-40", name)),
                             read_bytes(os.path.join(b, "checkpoint-40", name)), name)
        # metrics.jsonl of the resumed run starts after step 20 and matches.
        got = [m for m in metrics(b) if "loss" in m]
        want = [m for m in metrics(a) if "loss" in m][20:]
        self.assertEqual([m["loss"] for m in got], [m["loss"] for m in want])

    def test_sigterm_saves_and_resume_latest_matches(self):
        data = make_ids_dataset(os.path.join(self.tmp, "data"), 60)
        a, c = os.path.join(self.tmp, "a"), os.path.join(self.tmp, "c")
        self.train(*self.common(data), "--out", a)
        env = dict(os.environ, TRAINYARD_DEBUG_STEP_SLEEP_MS="40")
        p = subprocess.Popen([CFG.trainyard, "train"] + self.common(data) + ["--out", c],
                             stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.time() + 60
        while time.time() < deadline:
            path = os.path.join(c, "metrics.jsonl")
            if os.path.exists(path):
                with open(path) as f:
                    if sum(1 for _ in f) >= 8:
                        break
            time.sleep(0.02)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("SIGTERM received", err)
        saved = glob.glob(os.path.join(c, "checkpoint-*"))
        self.assertEqual(len(saved), 1, saved)
        stopped = int(saved[0].rsplit("-", 1)[1])
        self.assertTrue(0 < stopped < 40, stopped)
        self.train(*self.common(data), "--out", c, "--resume", "latest")
        for name in ("model.safetensors", "optimizer.safetensors"):
            self.assertEqual(read_bytes(os.path.join(a, "checkpoint-40", name)),
                             read_bytes(os.path.join(c, "checkpoint-40", name)), name)


    def test_grad_accum_matches_one_big_batch(self):
        # 2 micro-batches of 4 rows accumulate to the gradient of 8 rows.
        data = make_ids_dataset(os.path.join(self.tmp, "data"), 60)
        args = ["--model", os.path.join(CFG.models, "llama"), "--data", data, "--max-steps", "6",
                "--lr", "2e-3", "--log-every", "100"]
        one, two = os.path.join(self.tmp, "one"), os.path.join(self.tmp, "two")
        self.train(*args, "--out", one, "--batch-size", "8")
        self.train(*args, "--out", two, "--batch-size", "4", "--grad-accum", "2")
        a = [m for m in metrics(one) if "loss" in m]
        b = [m for m in metrics(two) if "loss" in m]
        for x, y in zip(a, b):
            self.assertAlmostEqual(x["loss"], y["loss"], delta=1e-5 * x["loss"])
            self.assertAlmostEqual(x["grad_norm"], y["grad_norm"], delta=1e-4 * x["grad_norm"])


class SafetyTest(Base):
    def test_sigkill_during_save_keeps_previous_checkpoint(self):
        data = make_ids_dataset(os.path.join(self.tmp, "data"), 60)
        out = os.path.join(self.tmp, "out")
        args = ["--model", os.path.join(CFG.models, "gpt2"), "--data", data, "--out", out,
                "--max-steps", "4", "--batch-size", "8", "--save-every", "2", "--keep", "0"]
        self.train(*args[:-4], "--max-steps", "2", "--save-every", "2", "--keep", "0")
        before = read_bytes(os.path.join(out, "checkpoint-2", "model.safetensors"))
        env = dict(os.environ, TRAINYARD_DEBUG_SAVE_SLEEP_MS="3000")
        p = subprocess.Popen([CFG.trainyard, "train"] + args + ["--resume", "latest"],
                             stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.time() + 60
        while time.time() < deadline and not glob.glob(os.path.join(out, ".checkpoint-4*")):
            time.sleep(0.01)
        time.sleep(0.2)  # inside the save's pause: weights written, state not yet
        p.kill()
        p.communicate(timeout=60)
        self.assertEqual(p.returncode, -signal.SIGKILL)
        self.assertFalse(os.path.exists(os.path.join(out, "checkpoint-4")))
        self.assertEqual(read_bytes(os.path.join(out, "checkpoint-2", "model.safetensors")), before)
        tokens = os.path.join(self.tmp, "tokens.json")
        with open(tokens, "w") as f:
            json.dump([[1, 2, 3, 4]], f)
        r = run(["forward", "--model", os.path.join(out, "checkpoint-2"), "--tokens", tokens,
                 "--out", os.path.join(self.tmp, "f.safetensors")])
        self.assertEqual(r.returncode, 0, r.stderr)
        # Resuming cleans the partial save up and finishes.
        self.train(*args, "--resume", "latest")
        self.assertTrue(os.path.exists(os.path.join(out, "checkpoint-4", "trainer_state.json")))
        self.assertFalse(glob.glob(os.path.join(out, ".checkpoint-*")))

    def test_nan_stops_with_a_clear_error(self):
        data = make_ids_dataset(os.path.join(self.tmp, "data"), 60)
        out = os.path.join(self.tmp, "out")
        r = self.train("--model", os.path.join(CFG.models, "gpt2"), "--data", data, "--out", out,
                       "--max-steps", "20", "--batch-size", "8", "--lr", "1e30",
                       "--clip", "0", "--save-every", "1", "--keep", "0", rc=1)
        self.assertIn("ABORTED", r.stderr)
        self.assertRegex(r.stderr, r"step \d+: the loss is (nan|inf|-nan)")
        bad = int(r.stderr.split("step ")[-1].split(":")[0])
        saved = sorted(int(p.rsplit("-", 1)[1]) for p in glob.glob(os.path.join(out, "checkpoint-*")))
        self.assertTrue(all(s < bad for s in saved), (saved, bad))

    def test_bad_usage(self):
        data = make_ids_dataset(os.path.join(self.tmp, "data"), 30)
        base = ["--data", data, "--out", os.path.join(self.tmp, "o")]
        for args, needle in (
            (["--preset", "gpt2-tiny", "--model", "x"] + base, "exactly one of --model and --preset"),
            (base, "exactly one of --model and --preset"),
            (["--preset", "gpt2-tiny", "--bogus", "1"] + base, "unknown option 'bogus'"),
            (["--preset", "gpt2-tiny", "--lr", "fast"] + base, "'fast' is not a number"),
            (["--preset", "gpt2-tiny", "--schedule", "zigzag"] + base, "--schedule"),
            (["--preset", "gpt2-tiny", "--grad-accum", "0"] + base, "--grad-accum must be >= 1"),
            (["--preset", "gpt2-tiny", "--dropout", "1"] + base, "--dropout must lie in [0, 1)"),
            (["--preset", "gpt2-tiny", "--config", "/nonexistent.cfg"] + base, "config file"),
        ):
            r = run(["train"] + args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(needle, r.stderr)
        r = run(["train", "--preset", "nosuch"] + base)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no model preset 'nosuch'", r.stderr)
        r = run(["train", "--help"])
        for flag in ("--batch-size", "--seq-len", "--grad-accum", "--epochs", "--max-steps", "--lr",
                     "--min-lr", "--warmup-steps", "--schedule", "--weight-decay", "--beta1",
                     "--beta2", "--eps", "--clip", "--dropout", "--seed", "--eval-every",
                     "--save-every", "--keep", "--resume"):
            self.assertIn(flag, r.stdout)
        # A config file with an override on the command line.
        cfg = os.path.join(self.tmp, "run.cfg")
        with open(cfg, "w") as f:
            f.write("# comment\npreset = gpt2-tiny\nmax_steps = 2\nbatch-size = 4\nlr=1e-3\n")
        out = os.path.join(self.tmp, "cfgout")
        r = run(["train", "--config", cfg, "--data", data, "--out", out, "max_steps=1"])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "train_config.json")) as f:
            saved = json.load(f)
        self.assertEqual((saved["max_steps"], saved["batch_size"], saved["lr"]), (1, 4, 1e-3))


class PositionsTest(Base):
    def test_max_positions(self):
        # llama-tiny has 512 positions; rows of 640 tokens need more.
        data = make_ids_dataset(os.path.join(self.tmp, "data"), 40, seq_len=640)
        common = ["--preset", "llama-tiny", "--data", data, "--batch-size", "2",
                  "--backend", "cpu?threads=2", "--log-every", "1", "--cache-dir", "none"]
        r = run(["train"] + common + ["--out", os.path.join(self.tmp, "short"),
                                      "--max-steps", "1"])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("exceeds the model's 512 positions", r.stderr)
        out = os.path.join(self.tmp, "long")
        self.train(*common, "--out", out, "--max-steps", "2", "--max-positions", "640",
                   "--save-every", "1")
        with open(os.path.join(out, "checkpoint-2", "config.json")) as f:
            self.assertEqual(json.load(f)["max_position_embeddings"], 640)
        losses = [m["loss"] for m in metrics(out) if "loss" in m]
        self.assertEqual(len(losses), 2)
        # A resume keeps the count, and refuses another.
        r = run(["train"] + common + ["--out", os.path.join(self.tmp, "again"), "--max-steps",
                                      "3", "--max-positions", "1024", "--resume",
                                      os.path.join(out, "checkpoint-1")])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("--max_positions was 640 and is now 1024", r.stderr)
        self.train(*common, "--out", os.path.join(self.tmp, "resumed"), "--max-steps", "2",
                   "--max-positions", "640", "--resume", os.path.join(out, "checkpoint-1"))
        self.assertEqual(read_bytes(os.path.join(out, "checkpoint-2", "model.safetensors")),
                         read_bytes(os.path.join(self.tmp, "resumed", "checkpoint-2",
                                                 "model.safetensors")))
        # Bad input.
        base = ["--data", data, "--out", os.path.join(self.tmp, "bad")]
        for args, needle in (
            (["--model", os.path.join(CFG.models, "llama"), "--max-positions", "1024"] + base,
             "--max-positions is for --preset"),
            (["--preset", "llama-tiny", "--max-positions", "-5"] + base,
             "--max-positions must be in [1, 16777216]"),
        ):
            r = run(["train"] + args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(needle, r.stderr)
        r = run(["compile", "--plan-only", "--backend", "cpu", "--model",
                 os.path.join(CFG.models, "llama"), "--max-positions", "1024"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--max-positions is for --preset", r.stderr)
        r = run(["compile", "--plan-only", "--backend", "cpu", "--preset", "llama-tiny",
                 "--vocab-size", "96", "--seq-len", "640", "--max-positions", "640"])
        self.assertEqual(r.returncode, 0, r.stderr)
        check = ["check", "--backend", "cpu", "--preset", "llama-tiny", "--vocab-size", "96",
                 "--seq-len", "640", "--batch-size", "1"]
        r = run(check)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("exceeds the model's 512 positions", r.stderr)
        r = run(check + ["--max-positions", "640"])
        self.assertEqual(r.returncode, 0, r.stderr)


class ChatTest(Base):
    def test_reported_loss_is_the_weighted_mean(self):
        try:
            import numpy as np
            from safetensors.numpy import load_file
        except ImportError:
            self.skipTest("numpy and safetensors are not installed")
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        corpus = os.path.join(self.tmp, "corpus.txt")
        with open(corpus, "w") as f:
            f.write("the user asks and the assistant answers politely. " * 200)
        tok = os.path.join(self.tmp, "tokenizer.json")
        r = run(["data", "train-tokenizer", "--input", corpus, "--vocab-size", "300", "--out", tok,
                 "--special", "<|im_start|>", "--special", "<|im_end|>"])
        self.assertEqual(r.returncode, 0, r.stderr)
        chat = os.path.join(self.tmp, "chat.jsonl")
        with open(chat, "w") as f:
            for i in range(6):
                f.write(json.dumps({"messages": [
                    {"role": "system", "content": "be polite"},
                    {"role": "user", "content": "the user asks %d" % i},
                    {"role": "assistant", "content": "the assistant answers %d" % i}]}) + "\n")
        data = os.path.join(self.tmp, "data")
        r = run(["data", "prepare", "--format", "chat", "--tokenizer", tok, "--input", chat,
                 "--seq-len", "24", "--out", data])
        self.assertEqual(r.returncode, 0, r.stderr)
        from test_data_cli import read_split  # the independent shard reader
        _, rows = read_split(data, "train")
        weights = [w for _, w in rows]
        self.assertTrue(any(0 in w for w in weights) and any(1 in w for w in weights))
        # One step over every row at once (order cannot matter), with a
        # learning rate so small the checkpoint still holds the weights the
        # step's loss was computed with.
        out = os.path.join(self.tmp, "out")
        self.train("--preset", "gpt2-tiny", "--data", data, "--out", out, "--max-steps", "1",
                   "--batch-size", str(len(rows)), "--lr", "1e-12", "--min-lr", "0",
                   "--weight-decay", "0", "--tokenizer", tok)
        reported = metrics(out)[0]["loss"]
        tokens = os.path.join(self.tmp, "tokens.json")
        with open(tokens, "w") as f:
            json.dump([list(t[:-1]) for t, _ in rows], f)
        fwd = os.path.join(self.tmp, "fwd.safetensors")
        r = run(["forward", "--model", os.path.join(out, "checkpoint-1"), "--tokens", tokens,
                 "--out", fwd])
        self.assertEqual(r.returncode, 0, r.stderr)
        logits = load_file(fwd)["logits"].astype(np.float64)
        total = count = 0.0
        for b, (t, w) in enumerate(rows):
            for i in range(len(w)):
                if w[i]:
                    row = logits[b, i]
                    m = row.max()
                    total += np.log(np.exp(row - m).sum()) + m - row[t[i + 1]]
                    count += 1
        self.assertAlmostEqual(reported, total / count, delta=1e-4 * abs(total / count))


def main():
    global CFG
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--models", required=True, help="tests/fixtures/models")
    CFG, rest = parser.parse_known_args()
    program = unittest.main(argv=[sys.argv[0], "-v"] + rest, exit=False)
    return unittest_exit.exit_code(program.result)


if __name__ == "__main__":
    sys.exit(main())
