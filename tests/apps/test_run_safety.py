#!/usr/bin/env python3
"""End-to-end tests of what `trainyard` promises about the user's data, with
real processes (Python standard library only):

- SignalTest: SIGTERM at random moments of training steps, in bursts, never
  corrupts the process (hundreds of signals; oneDNN's JIT GEMM kernels once
  turned a signal frame into heap corruption) and always ends in a whole
  checkpoint; SIGTERM while the console is a pipe whose reader is gone
  still saves (SIGPIPE no longer kills the run); SIGHUP (a dropped SSH
  session) finishes the step, saves and exits 0 like SIGTERM.
- RunFolderTest: a fresh run refuses a folder that holds a run (naming it)
  unless --overwrite, which deletes only the files a run writes; a run
  refused at start-up (a bad --control-registry) leaves --out as it was
  (absent, empty, or the earlier run a refused --overwrite keeps); two runs
  on one folder at once: the second is refused naming the first's pid, and
  never deletes the first's save in progress; --resume latest needs a
  checkpoint (--resume auto does not); a resumed run refuses later
  checkpoints; compare keeps an earlier comparison unless --overwrite; a save
  that fails for want of space keeps the previous checkpoint whole.
- ResumeStateTest: a resume notes each changed hyperparameter with its old
  and new value; a trainer_state.json with a field out of range or of the
  wrong type, or whose progress cannot follow from its step, is refused
  naming the file (DATA_LOSS); a metrics.jsonl ending in binary data is
  refused naming file and offset, as one with a bad line is.
- OutputGuardTest: no command writes over one of its inputs (forward,
  data prepare, data train-tokenizer, compile, train, compare): an output
  that is an input (also through a symbolic or hard link), lies inside an
  input folder, or (data prepare) holds an input is refused and the input
  is left as it was; a missing output folder is named as the user gave it.
"""
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_train_cli as common  # noqa: E402  (run(), the datasets, main())
from test_train_cli import make_ids_dataset, run  # noqa: E402


class Base(common.Base):
    def start_train(self, args, **kw):
        return subprocess.Popen([common.CFG.trainyard, "train"] + list(args), text=True, **kw)

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
    # stack pointer onto the heap. One thread: cheap on shared CI cores, and
    # the thread that runs them is the one a handler would have run on.
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
        # 12 runs of 20 signals take about 8 s in an optimized build; a
        # sanitizer build (steps ~50x slower) stops after 20 s, with 2 runs
        # at least: it is there for memory errors, the loop for the race.
        runs, burst, sent, budget, start = 0, 20, 0, 20.0, time.time()
        while runs < 12 and (runs < 2 or time.time() - start < budget):
            i, runs = runs, runs + 1
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
            p.stderr.close()
            p.wait(timeout=120)
            self.assertEqual(p.returncode, 0, "run %d of seed %d: %s" % (i, seed, err[-2000:]))
            self.assertIn("SIGTERM received", err)
            self.assert_whole_checkpoint(out)
            shutil.rmtree(out)
        print("SignalTest: %d SIGTERMs into %d runs, every run saved" % (sent, runs))
        self.assertGreaterEqual(sent, 2 * runs)

    def test_sighup_saves_like_sigterm(self):
        """A dropped SSH session sends SIGHUP: the run saves and exits 0
        (it once died with 129, losing everything since the last save)."""
        data = make_ids_dataset(os.path.join(self.tmp, "data"), 60)
        out = os.path.join(self.tmp, "out")
        args = self.args(data, out)
        args[args.index("--batch-size") + 1] = "4"
        p = self.start_train(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=dict(os.environ, TRAINYARD_DEBUG_STEP_SLEEP_MS="20"))
        for line in p.stderr:
            if line.startswith("Epoch"):
                break
        p.send_signal(signal.SIGHUP)
        err = p.stderr.read()
        p.stderr.close()
        p.wait(timeout=120)
        self.assertEqual(p.returncode, 0, err[-2000:])
        m = re.search(r"SIGHUP received after step (\d+): saving and stopping", err)
        self.assertTrue(m, err[-2000:])
        saved = self.assert_whole_checkpoint(out)
        self.assertEqual(os.path.basename(saved), "checkpoint-" + m.group(1))

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


def strip_metadata(path):
    """Rewrites a safetensors file without Trainyard's identity metadata, as
    a checkpoint from before run ids was written."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.get("__metadata__", {})
    meta.pop("trainyard_run_id", None)
    meta.pop("trainyard_step", None)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)


def tree(path):
    """{relative path: bytes} of every file under path."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            if name == ".trainyard.lock":
                continue  # who held the folder last
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = f.read()
    return out


def steps_logged(out):
    """Lines in out/metrics.jsonl: a run logs its first once SIGTERM saves."""
    try:
        with open(os.path.join(out, "metrics.jsonl")) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def wait_for(predicate, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


class RunFolderTest(Base):
    def setUp(self):
        super().setUp()
        self.data = make_ids_dataset(os.path.join(self.tmp, "data"), 60)
        self.out = os.path.join(self.tmp, "run")

    def args(self, *extra, steps=4, out=None):
        return ["--preset", "gpt2-tiny", "--data", self.data, "--out", out or self.out,
                "--batch-size", "4", "--max-steps", str(steps), "--log-every", "100",
                "--eval-batches", "1"] + list(extra)

    def test_fresh_run_refuses_a_folder_that_holds_a_run(self):
        self.train(*self.args("--save-every", "2", steps=4))
        before = tree(self.out)
        # A second, shorter run without --resume used to replace
        # metrics.jsonl and checkpoint-2 and leave checkpoint-4 behind.
        r = self.train(*self.args(steps=2), rc=1)
        self.assertIn("FAILED_PRECONDITION", r.stderr)
        self.assertIn(self.out + " already holds a training run", r.stderr)
        self.assertIn("checkpoint-4/", r.stderr)
        self.assertIn("metrics.jsonl", r.stderr)
        self.assertIn("--resume latest", r.stderr)
        self.assertEqual(before, tree(self.out))
        # A folder that holds only the user's files is not a run.
        other = os.path.join(self.tmp, "mine")
        os.makedirs(os.path.join(other, "notes"))
        with open(os.path.join(other, "README"), "w") as f:
            f.write("mine")
        self.train(*self.args(steps=1, out=other))
        with open(os.path.join(other, "README")) as f:
            self.assertEqual(f.read(), "mine")

    def test_refused_run_leaves_the_folder_as_it_was(self):
        """A run refused for a bad --control-registry once left
        metrics.jsonl, tensorboard/ and train_config.json in --out, and its
        corrected retry was refused as "already holds a training run"."""
        bad = os.path.join(self.tmp, "not-a-folder")
        with open(bad, "w") as f:
            f.write("x")
        good = os.path.join(self.tmp, "registry")
        # --out absent: still absent after the refusal.
        r = self.train(*self.args("--control-registry", bad, steps=1), rc=1)
        self.assertIn("--control-registry %s" % bad, r.stderr)
        self.assertIn("not a folder", r.stderr)
        self.assertFalse(os.path.exists(self.out), os.listdir(self.out)
                         if os.path.isdir(self.out) else None)
        # --out an empty folder: still empty.
        os.makedirs(self.out)
        self.train(*self.args("--control-registry", bad, steps=1), rc=1)
        self.assertEqual(os.listdir(self.out), [])
        # The corrected retry runs.
        self.train(*self.args("--control-registry", good, steps=2))
        self.assertTrue(os.path.isdir(os.path.join(self.out, "checkpoint-2")))
        # --overwrite over that run, refused: the run is still there, whole.
        before = tree(self.out)
        r = self.train(*self.args("--control-registry", bad, "--overwrite", steps=1), rc=1)
        self.assertNotIn("deleted the run", r.stderr)
        self.assertEqual(before, tree(self.out))

    def test_resume_past_the_end_is_said(self):
        """--resume latest --max-steps 300 from a later checkpoint once
        exited 0 having trained nothing, silently."""
        self.train(*self.args(steps=4))
        ckpt = os.path.join(self.out, "checkpoint-4")
        before = tree(self.out)
        for steps in (2, 4):
            r = self.train(*self.args("--resume", "latest", steps=steps), rc=1)
            self.assertIn("FAILED_PRECONDITION", r.stderr)
            self.assertIn("--resume latest: %s is at step 4 and --max-steps is %d: nothing to "
                          "train" % (ckpt, steps), r.stderr)
            self.assertIn("--allow-done", r.stderr)
            self.assertEqual(before, tree(self.out))
        # A checkpoint folder given by name: the same, and the other --out
        # is left as it was (absent).
        other = os.path.join(self.tmp, "other")
        r = self.train(*self.args("--resume", ckpt, steps=4, out=other), rc=1)
        self.assertIn("--resume %s: %s is at step 4 and --max-steps is 4" % (ckpt, ckpt),
                      r.stderr)
        self.assertFalse(os.path.exists(other))
        # Asked for: a note, exit 0, nothing written.
        for extra in (["--resume", "latest", "--allow-done"], ["--resume", "auto"]):
            r = self.train(*self.args(*extra, steps=3))
            self.assertIn("%s is at step 4 and --max-steps is 3: the run is complete, nothing "
                          "to train" % ckpt, r.stderr)
            self.assertEqual(before, tree(self.out))
        r = run(["train"] + self.args("--allow-done", steps=1, out=os.path.join(self.tmp, "x")))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--allow-done has no effect without --resume", r.stderr)
        # A raised target trains on.
        self.train(*self.args("--resume", "latest", steps=6))
        self.assertTrue(os.path.isdir(os.path.join(self.out, "checkpoint-6")))

    def test_overwrite_deletes_only_the_run(self):
        self.train(*self.args("--save-every", "2", steps=4))
        with open(os.path.join(self.out, "notes.txt"), "w") as f:
            f.write("the user's")
        os.makedirs(os.path.join(self.out, "eval"))
        with open(os.path.join(self.out, "eval", "scores.json"), "w") as f:
            f.write("{}")
        # Something of the user's inside a checkpoint: nothing is deleted.
        extra = os.path.join(self.out, "checkpoint-2", "my-eval.txt")
        with open(extra, "w") as f:
            f.write("mine")
        before = tree(self.out)
        r = self.train(*self.args("--overwrite", steps=1), rc=1)
        self.assertIn("FAILED_PRECONDITION", r.stderr)
        self.assertIn(extra + " is not a file a training run writes; nothing was deleted",
                      r.stderr)
        self.assertEqual(before, tree(self.out))
        os.remove(extra)
        # An input of the new run inside the old run: refused too.
        ckpt = os.path.join(self.out, "checkpoint-4")
        r = self.train("--model", ckpt, "--data", self.data, "--out", self.out,
                       "--max-steps", "1", "--batch-size", "4", "--overwrite", rc=1)
        self.assertIn("--overwrite would delete " + ckpt + ", which holds --model", r.stderr)
        self.assertTrue(os.path.exists(os.path.join(ckpt, "model.safetensors")))
        # --overwrite deletes the run, keeps the rest, and the new run is whole.
        r = self.train(*self.args("--overwrite", steps=1))
        self.assertIn("--overwrite: deleted the run in " + self.out, r.stderr)
        self.assertEqual(sorted(glob.glob(os.path.join(self.out, "checkpoint-*"))),
                         [os.path.join(self.out, "checkpoint-1")])
        with open(os.path.join(self.out, "metrics.jsonl")) as f:
            self.assertEqual([json.loads(l)["step"] for l in f if '"loss"' in l], [1])
        with open(os.path.join(self.out, "notes.txt")) as f:
            self.assertEqual(f.read(), "the user's")
        self.assertTrue(os.path.exists(os.path.join(self.out, "eval", "scores.json")))
        # --overwrite with --resume latest is a contradiction.
        r = self.train(*self.args("--overwrite", "--resume", "latest"), rc=2)
        self.assertIn("give one of them", r.stderr)

    def test_two_runs_at_once_the_second_is_refused(self):
        first = self.start_train(self.args(steps=100000), stderr=subprocess.PIPE,
                                 env=dict(os.environ, TRAINYARD_DEBUG_STEP_SLEEP_MS="20"))
        self.assertTrue(wait_for(lambda: steps_logged(self.out) >= 1))  # training, not starting
        r = self.train(*self.args(steps=3), rc=1)
        self.assertIn("FAILED_PRECONDITION", r.stderr)
        self.assertIn("in use by another trainyard run (pid %d" % first.pid, r.stderr)
        self.assertIsNone(first.poll())
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
        self.assertEqual(first.returncode, 0, err)
        # The first run alone wrote the folder: one unbroken series of steps.
        with open(os.path.join(self.out, "metrics.jsonl")) as f:
            steps = [json.loads(l)["step"] for l in f if '"loss"' in l]
        self.assertEqual(steps, list(range(1, len(steps) + 1)))
        saved = self.assert_whole_checkpoint(self.out)
        self.assertEqual(saved, os.path.join(self.out, "checkpoint-%d" % len(steps)))

    def test_a_second_run_never_deletes_a_save_in_progress(self):
        first = self.start_train(self.args(steps=1), stderr=subprocess.PIPE,
                                 env=dict(os.environ, TRAINYARD_DEBUG_SAVE_SLEEP_MS="3000"))
        pattern = os.path.join(self.out, ".checkpoint-1.tmp-%d" % first.pid)
        self.assertTrue(wait_for(lambda: os.path.exists(pattern)))
        # The second run's start-up clean-up used to delete this folder.
        r = self.train(*self.args(steps=1), rc=1)
        self.assertIn("in use by another trainyard run (pid %d" % first.pid, r.stderr)
        self.assertTrue(os.path.exists(pattern))
        _, err = first.communicate(timeout=120)
        self.assertEqual(first.returncode, 0, err)
        self.assert_whole_checkpoint(self.out)
        # Once the first run is gone, the folder is free again: a partial
        # save of a killed run is cleaned up by the next one.
        leftover = os.path.join(self.out, ".checkpoint-9.tmp-1")
        os.makedirs(leftover)
        self.train(*self.args(steps=2), "--resume", "latest")
        self.assertFalse(os.path.exists(leftover))

    def test_resume_latest_needs_a_checkpoint(self):
        r = self.train(*self.args("--resume", "latest"), rc=1)
        self.assertIn("NOT_FOUND: --resume latest: %s holds no complete checkpoint" % self.out,
                      r.stderr)
        self.assertFalse(glob.glob(os.path.join(self.out, "checkpoint-*")))
        self.assertFalse(os.path.exists(os.path.join(self.out, "metrics.jsonl")))
        # auto: resume if there is a checkpoint, else start fresh.
        r = self.train(*self.args("--resume", "auto", steps=2))
        self.assertNotIn("resuming from", r.stderr)
        r = self.train(*self.args("--resume", "auto", steps=4))
        self.assertIn("resuming from %s/checkpoint-2" % self.out, r.stderr)

    def test_resume_from_an_earlier_checkpoint_refuses_later_ones(self):
        self.train(*self.args("--save-every", "2", "--keep", "0", steps=4))
        r = self.train(*self.args("--resume", os.path.join(self.out, "checkpoint-2"), steps=6),
                       rc=1)
        self.assertIn("also holds checkpoint-4, past step 2", r.stderr)
        # Into another, empty folder it is fine; into one holding a run not.
        other = os.path.join(self.tmp, "other")
        r = self.train(*self.args("--resume", os.path.join(self.out, "checkpoint-2"), steps=3,
                                  out=other))
        self.assertIn("resuming from", r.stderr)
        r = self.train(*self.args("--resume", os.path.join(other, "checkpoint-3"), steps=5),
                       rc=1)
        self.assertIn("already holds a training run", r.stderr)
        self.assertIn("choose an empty --out", r.stderr)

    def test_misplaced_names_and_a_summary_that_is_a_folder(self):
        os.makedirs(os.path.join(self.out, "summary.txt"))
        r = self.train(*self.args(steps=1), rc=1)
        self.assertIn("FAILED_PRECONDITION: %s/summary.txt is a folder, not the file a training "
                      "run writes there" % self.out, r.stderr)
        os.rmdir(os.path.join(self.out, "summary.txt"))
        # Appearing during the run: the checkpoint is saved, and the error
        # gives the system's reason with the right code.
        p = self.start_train(self.args(steps=1000), stderr=subprocess.PIPE,
                             env=dict(os.environ, TRAINYARD_DEBUG_STEP_SLEEP_MS="20"))
        self.assertTrue(wait_for(lambda: steps_logged(self.out) >= 1))  # training, not starting
        os.makedirs(os.path.join(self.out, "summary.txt"))
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 1, err)
        self.assertIn("FAILED_PRECONDITION", err)
        self.assertIn("summary.txt", err)
        self.assertIn("a folder of that name is in the way", err)
        self.assert_whole_checkpoint(self.out)

    def test_full_disk_during_a_save_keeps_the_previous_checkpoint(self):
        self.train(*self.args("--keep", "0", steps=2))
        before = tree(os.path.join(self.out, "checkpoint-2"))

        def small_files():  # every file may grow to 64 KiB: the weights cannot
            import resource
            resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, as ENOSPC: no signal

        p = self.start_train(self.args("--resume", "latest", "--keep", "0", steps=4),
                             stderr=subprocess.PIPE, preexec_fn=small_files)
        _, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 1, err)
        self.assertIn("RESOURCE_EXHAUSTED", err)
        self.assertIn("saving checkpoint 4", err)
        self.assertEqual(tree(os.path.join(self.out, "checkpoint-2")), before)
        self.assertFalse(os.path.exists(os.path.join(self.out, "checkpoint-4")))
        self.assertFalse(glob.glob(os.path.join(self.out, ".checkpoint-*")))
        # With room again the run resumes from the checkpoint it kept.
        r = self.train(*self.args("--resume", "latest", "--keep", "0", steps=4))
        self.assertIn("resuming from %s/checkpoint-2" % self.out, r.stderr)
        self.assertTrue(os.path.exists(os.path.join(self.out, "checkpoint-4", "trainer_state.json")))

    def test_compare_keeps_an_earlier_comparison(self):
        out = os.path.join(self.tmp, "cmp")
        args = ["compare", "--backends", "cpu,cpu?threads=1", "--steps", "2", "--out", out,
                "--preset", "gpt2-tiny", "--data", self.data, "--batch-size", "4",
                "--eval-batches", "1"]
        r = run(args)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        log = os.path.join(out, "1-cpu", "train.log")
        with open(log) as f:
            first_log = f.read()
        r = run(args)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("already holds the run of an earlier comparison", r.stderr)
        with open(log) as f:
            self.assertEqual(f.read(), first_log)
        r = run(args + ["--overwrite"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class ResumeStateTest(Base):
    def setUp(self):
        super().setUp()
        self.data = make_ids_dataset(os.path.join(self.tmp, "data"), 60)
        self.out = os.path.join(self.tmp, "run")

    def args(self, *extra, steps=4):
        return ["--preset", "gpt2-tiny", "--data", self.data, "--out", self.out,
                "--batch-size", "4", "--max-steps", str(steps), "--log-every", "100",
                "--eval-batches", "1"] + list(extra)

    def test_changed_hyperparameters_are_noted(self):
        self.train(*self.args(steps=2))
        r = self.train(*self.args("--resume", "latest", "--lr", "1e-3", "--schedule", "linear",
                                  "--warmup-steps", "1", steps=4))
        for needle in ("note: --lr is 0.001; the run being resumed used 0.0003 (from step 3 on",
                       "note: --schedule is linear; the run being resumed used cosine",
                       "note: --warmup-steps is 1; the run being resumed used 0",
                       "note: --max-steps is 4; the run being resumed used 2"):
            self.assertIn(needle, r.stderr)
        r = self.train(*self.args("--resume", "latest", "--lr", "1e-3", "--schedule", "linear",
                                  "--warmup-steps", "1", steps=5))
        self.assertNotIn("note: --lr", r.stderr)  # the same as the checkpoint's run

    def two_runs(self):
        """Two runs of the same configuration, A and B, saved at step 2:
        their parts fit each other's shapes, only their identities differ."""
        runs = []
        for name in ("A", "B"):
            out = os.path.join(self.tmp, name)
            self.train(*(self.args(steps=2)[:5] + [out] + self.args(steps=2)[6:]))
            runs.append(os.path.join(out, "checkpoint-2"))
        return runs

    def resume_from(self, ckpt, rc=1):
        out = os.path.join(self.tmp, "resumed-%d" % len(os.listdir(self.tmp)))
        return self.train(*(self.args(steps=3)[:5] + [out] + self.args(steps=3)[6:]
                             + ["--resume", ckpt]), rc=rc)

    @staticmethod
    def run_id(ckpt):
        with open(os.path.join(ckpt, "trainer_state.json")) as f:
            return json.load(f)["run_id"]

    def test_parts_of_two_runs_are_refused(self):
        """Optimizer shards of two runs merged, a model of one run with the
        optimizer state of another, an index whose world size disagrees
        with its shards: all once accepted silently."""
        a, b = self.two_runs()
        ida, idb = self.run_id(a), self.run_id(b)
        self.assertRegex(ida, r"^[0-9a-f]{32}$")
        self.assertNotEqual(ida, idb)
        # The run id is kept across a resume.
        r = self.resume_from(a, rc=0)
        resumed = glob.glob(os.path.join(self.tmp, "resumed-*", "checkpoint-3"))
        self.assertEqual(len(resumed), 1, r.stderr)
        self.assertEqual(self.run_id(resumed[0]), ida)
        # A model of run B with the optimizer state of run A.
        mixed = os.path.join(self.tmp, "mixed-model")
        shutil.copytree(a, mixed)
        shutil.copy(os.path.join(b, "model.safetensors"), mixed)
        r = self.resume_from(mixed)
        self.assertIn("DATA_LOSS", r.stderr)
        self.assertIn("%s/model.safetensors is from run %s at step 2, but %s/trainer_state.json "
                      "is from run %s at step 2" % (mixed, idb, mixed, ida), r.stderr)
        # ZeRO-1 shards of two runs (ckpt split makes them as 2 ranks do).
        for ckpt in (a, b):
            r = run(["ckpt", "split", ckpt, "--ranks", "2"])
            self.assertEqual(r.returncode, 0, r.stderr)
        shard2 = "optimizer-00002-of-00002.safetensors"
        with open(os.path.join(a, "optimizer.safetensors.index.json")) as f:
            index = json.load(f)
        self.assertEqual(index["metadata"]["run_id"], ida)
        self.assertEqual(index["metadata"]["step"], 2)
        shards = os.path.join(self.tmp, "mixed-shards")
        shutil.copytree(a, shards)
        shutil.copy(os.path.join(b, shard2), shards)
        for args in (["ckpt", "merge", shards], None):
            r = run(args) if args else self.resume_from(shards)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("%s/%s is from run %s at step 2, but %s/trainer_state.json is from "
                          "run %s at step 2" % (shards, shard2, idb, shards, ida), r.stderr)
        self.assertTrue(os.path.exists(os.path.join(shards, shard2)))  # merge wrote nothing
        self.assertFalse(os.path.exists(os.path.join(shards, "optimizer.safetensors")))
        # An index whose world size disagrees with the two shards.
        bad = os.path.join(self.tmp, "bad-index")
        shutil.copytree(a, bad)
        index["metadata"]["world_size"] = 3
        with open(os.path.join(bad, "optimizer.safetensors.index.json"), "w") as f:
            json.dump(index, f)
        for args in (["ckpt", "merge", bad], None):
            r = run(args) if args else self.resume_from(bad)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("%s/optimizer.safetensors.index.json says 2 replicas (world_size 3"
                          % bad, r.stderr)
            self.assertIn("but %s holds 2 optimizer shards" % bad, r.stderr)
        # The whole split checkpoint merges and resumes.
        r = run(["ckpt", "merge", a])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.resume_from(a, rc=0)

    def test_checkpoint_without_run_ids_still_resumes(self):
        """A checkpoint from before run ids (none in any part) resumes and
        the continued run gets an id; an id in one part only is a mix."""
        self.train(*self.args(steps=2))
        ckpt = os.path.join(self.out, "checkpoint-2")
        path = os.path.join(ckpt, "trainer_state.json")
        with open(path) as f:
            state = json.load(f)
        del state["run_id"]
        with open(path, "w") as f:
            json.dump(state, f)
        # The state lost its id, the model and optimizer still carry theirs.
        r = self.resume_from(ckpt)
        self.assertIn("model.safetensors is from run %s at step 2, but %s is from no run id"
                      % (self.run_id_of_file(ckpt), path), r.stderr)
        for name in ("model.safetensors", "optimizer.safetensors"):
            strip_metadata(os.path.join(ckpt, name))
        r = self.resume_from(ckpt, rc=0)
        self.assertIn("has no run id (saved before run ids); this run's checkpoints carry run id",
                      r.stderr)

    @staticmethod
    def run_id_of_file(ckpt):
        with open(os.path.join(ckpt, "model.safetensors"), "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            return json.loads(f.read(n))["__metadata__"]["trainyard_run_id"]

    def edit_state(self, ckpt, **fields):
        path = os.path.join(self.out, ckpt, "trainer_state.json")
        with open(path) as f:
            state = json.load(f)
        state.update(fields)
        with open(path, "w") as f:
            json.dump(state, f)
        return path, state

    def test_trainer_state_is_checked(self):
        self.train(*self.args("--save-every", "2", "--keep", "0", steps=6))
        with open(os.path.join(self.out, "checkpoint-6", "trainer_state.json")) as f:
            good = json.load(f)
        for fields, needle in (
            ({"step": -2}, '"step" is -2; it must be >= 0'),
            ({"cursor": "12"}, '"cursor" is of another type, not an integer'),
            ({"tokens_seen": None}, '"tokens_seen" is of another type, not an integer'),
            ({"train_seconds": -1.0}, '"train_seconds" is -1; it must be a number >= 0'),
            ({"config": {"lr": "fast"}}, "the saved configuration's option 'lr' is not a number"),
            ({"tokens_seen": good["tokens_seen"] * 10},
             "tokens_seen %d cannot follow from step 6" % (good["tokens_seen"] * 10)),
            ({"tokens_seen": good["tokens_seen"] // 2},
             "tokens_seen %d cannot follow from step 6" % (good["tokens_seen"] // 2)),
            ({"step": 60}, "step 60 puts the data at epoch"),
            # A cursor one step's rows in (a consistent-looking but wrong place).
            ({"cursor": 4}, "step 6 puts the data at epoch %d, cursor %d, but the file says "
                            "epoch %d, cursor 4" % (good["epoch"], good["cursor"], good["epoch"])),
            ({"step": 0}, "step 0 with epoch"),
        ):
            path, _ = self.edit_state("checkpoint-6", **dict(good, **fields))
            r = self.train(*self.args("--resume", "latest", steps=8), rc=1)
            self.assertIn("DATA_LOSS: " + path + ": " + needle, r.stderr)
            self.assertNotIn("node ", r.stderr)
        self.edit_state("checkpoint-6", **good)
        self.train(*self.args("--resume", "latest", steps=8))

    def test_binary_metrics_are_refused_like_bad_lines(self):
        self.train(*self.args(steps=2))
        metrics = os.path.join(self.out, "metrics.jsonl")
        with open(metrics, "rb") as f:
            text = f.read()
        n = text.count(b"\n") + 1
        # Binary bytes without a NUL after the last line (the capped reader
        # refuses any NUL byte in a text file before the lines are read).
        for tail, needle in ((b"\x7fELF\x02\x01\x01\x03" * 8,
                              ":%d: the 64 bytes at offset %d" % (n, len(text))),
                             (b"\x7fELF\x02\x01\x01\x00" * 8,
                              " holds a NUL byte at offset %d" % (len(text) + 7)),
                             (b"not json\n", ":%d: not JSON" % n)):
            with open(metrics, "wb") as f:
                f.write(text + tail)
            r = self.train(*self.args("--resume", "latest", steps=4), rc=1)
            self.assertIn(metrics + needle, r.stderr)
            self.assertIn("DATA_LOSS: ", r.stderr)
            with open(metrics, "rb") as f:
                self.assertEqual(f.read(), text + tail)
        # A whole file of binary data (no newline at all) too.
        for body, needle in ((b"\x01\x02\x03" * 100, metrics + ":1: the 300 bytes at offset 0"),
                             (b"\x00\x01\x02" * 100,
                              "metrics file " + metrics + " holds a NUL byte at offset 0")):
            with open(metrics, "wb") as f:
                f.write(body)
            r = self.train(*self.args("--resume", "latest", steps=4), rc=1)
            self.assertIn("DATA_LOSS: " + needle, r.stderr)
        # A line cut off mid-write is what a crash leaves: dropped.
        with open(metrics, "wb") as f:
            f.write(text + b'{"step": 3, "lo')
        self.train(*self.args("--resume", "latest", steps=3))
        with open(metrics) as f:
            self.assertEqual([json.loads(l)["step"] for l in f if '"loss"' in l], [1, 2, 3])


class OutputGuardTest(Base):
    def setUp(self):
        super().setUp()
        self.model = os.path.join(self.tmp, "model")
        shutil.copytree(os.path.join(common.CFG.models, "gpt2"), self.model)
        self.tokens = os.path.join(self.tmp, "tokens.json")
        with open(self.tokens, "w") as f:
            json.dump([[1, 2, 3, 4]], f)
        self.before = tree(self.tmp)

    def refused(self, args, needle, code="INVALID_ARGUMENT"):
        r = run(args)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(code, r.stderr)
        self.assertIn(needle, r.stderr)
        return r

    def assert_inputs_untouched(self):
        now = tree(self.tmp)
        for name, data in self.before.items():
            self.assertEqual(now.get(name), data, name)

    def test_forward(self):
        weights = os.path.join(self.model, "model.safetensors")
        fwd = ["forward", "--model", self.model, "--tokens", self.tokens]
        self.refused(fwd + ["--out", weights],
                     "--out %s lies inside the --model folder %s" % (weights, self.model))
        self.refused(fwd + ["--out", os.path.join(self.model, "logits.safetensors")],
                     "lies inside the --model folder")
        self.refused(fwd + ["--out", self.tokens],
                     "--out %s is the --tokens %s itself" % (self.tokens, self.tokens))
        link = os.path.join(self.tmp, "link.safetensors")
        os.symlink(weights, link)
        self.refused(fwd + ["--out", link], "lies inside the --model folder")
        hard = os.path.join(self.tmp, "hard.json")
        os.link(self.tokens, hard)
        self.refused(fwd + ["--out", hard], "is the --tokens")
        # A hard link to a file of the model folder, outside that folder:
        # once accepted (the write replaced the link).
        hard_weights = os.path.join(self.tmp, "hard.safetensors")
        os.link(weights, hard_weights)
        self.refused(fwd + ["--out", hard_weights],
                     "--out %s is %s of the --model folder %s (a hard link"
                     % (hard_weights, weights, self.model))
        self.assertTrue(os.path.samefile(hard_weights, weights))
        os.remove(hard_weights)
        self.refused(fwd + ["--out", os.path.join(self.tmp, "o.safetensors"), "--dump-graph",
                            os.path.join(self.model, "graph")],
                     "--dump-graph %s/graph.txt lies inside the --model folder" % self.model)
        missing = os.path.join(self.tmp, "no", "such", "o.safetensors")
        r = self.refused(fwd + ["--out", missing],
                         "--out: cannot write safetensors file %s: its folder %s does not exist"
                         % (missing, os.path.dirname(missing)), code="NOT_FOUND")
        self.assertNotIn(".tmp", r.stderr)
        os.remove(link)
        os.remove(hard)
        self.assert_inputs_untouched()
        r = run(fwd + ["--out", os.path.join(self.tmp, "o.safetensors")])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_data_prepare_and_train_tokenizer(self):
        corpus = os.path.join(self.tmp, "corpus.txt")
        with open(corpus, "w") as f:
            f.write("the quick brown fox jumps over the lazy dog. " * 50)
        tok = os.path.join(self.tmp, "tok.json")
        r = run(["data", "train-tokenizer", "--input", corpus, "--vocab-size", "300",
                 "--out", tok])
        self.assertEqual(r.returncode, 0, r.stderr)
        data = os.path.join(self.tmp, "data")
        prep = ["data", "prepare", "--tokenizer", tok, "--seq-len", "16"]
        r = run(prep + ["--input", corpus, "--out", data])
        self.assertEqual(r.returncode, 0, r.stderr)
        # An input kept inside the dataset folder that --force replaces whole.
        inside = os.path.join(data, "more.txt")
        shutil.copy(corpus, inside)
        self.before = tree(self.tmp)
        self.refused(prep + ["--input", inside, "--out", data, "--force"],
                     "--input %s lies inside --out %s, which this command replaces whole" % (
                         inside, data))
        self.refused(prep + ["--input", corpus, "--out", corpus, "--force"],
                     "--out %s is the --input %s itself" % (corpus, corpus))
        self.refused(prep + ["--input", corpus, "--out", tok, "--force"],
                     "is the --tokenizer")
        missing = os.path.join(self.tmp, "no", "data")
        r = self.refused(prep + ["--input", corpus, "--out", missing],
                         "--out: cannot write dataset folder %s: its folder" % missing,
                         code="NOT_FOUND")
        self.assertNotIn(".tmp", r.stderr)
        tt = ["data", "train-tokenizer", "--vocab-size", "300", "--force"]
        self.refused(tt + ["--input", corpus, "--out", corpus], "is the --input")
        folder = os.path.join(self.tmp, "texts")
        os.makedirs(folder)
        shutil.copy(corpus, os.path.join(folder, "a.txt"))
        self.before = tree(self.tmp)
        self.refused(tt + ["--input", folder, "--out", os.path.join(folder, "tok.json")],
                     "lies inside the --input folder %s" % folder)
        missing = os.path.join(self.tmp, "no", "tok.json")
        r = self.refused(tt + ["--input", corpus, "--out", missing],
                         "--out: cannot write tokenizer %s: its folder" % missing,
                         code="NOT_FOUND")
        self.assertNotIn(".tmp", r.stderr)
        self.assert_inputs_untouched()

    def test_compile_train_and_compare(self):
        data = make_ids_dataset(os.path.join(self.tmp, "data"), 30)
        self.before = tree(self.tmp)
        comp = ["compile", "--backend", "dataflow", "--model", self.model, "--batch-size", "2",
                "--seq-len", "8"]
        self.refused(comp + ["--out", os.path.join(self.model, "model.safetensors")],
                     "lies inside the --model folder")
        self.refused(["compile", "--backend", "dataflow", "--preset", "gpt2-tiny", "--data", data,
                      "--batch-size", "2", "--out", os.path.join(data, "a.tyart")],
                     "--out %s/a.tyart lies inside the --data folder %s" % (data, data))
        train = ["train", "--preset", "gpt2-tiny", "--data", data, "--max-steps", "1",
                 "--batch-size", "2"]
        self.refused(train + ["--out", data], "--out %s is the --data %s itself" % (data, data))
        self.refused(["train", "--model", self.model, "--data", data, "--max-steps", "1",
                      "--out", os.path.join(self.model, "run")],
                     "lies inside the --model folder %s" % self.model)
        self.refused(["compare", "--backends", "cpu,cpu", "--steps", "1", "--preset", "gpt2-tiny",
                      "--data", data, "--out", os.path.join(data, "cmp")],
                     "lies inside the --data folder")
        # --dump-graph (train, compile, check) writes P.txt and P.dot: not into an input.
        graph = os.path.join(self.model, "graph")
        self.refused(["train", "--model", self.model, "--data", data, "--max-steps", "1",
                      "--out", os.path.join(self.tmp, "run"), "--dump-graph", graph],
                     "--dump-graph %s.txt lies inside the --model folder" % graph)
        self.refused(comp + ["--out", os.path.join(self.tmp, "a.tyart"), "--dump-graph", graph],
                     "--dump-graph %s.txt lies inside the --model folder" % graph)
        self.refused(["check", "--backend", "cpu", "--model", self.model, "--dump-graph",
                      os.path.join(self.model, "g")],
                     "--dump-graph %s/g-forward.txt lies inside the --model folder" % self.model)
        self.assert_inputs_untouched()


if __name__ == "__main__":
    sys.exit(common.main())
