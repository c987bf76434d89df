"""What the end-to-end tests of issue 12 (test_inputs_cli.py, every input
validated; test_options_cli.py, every option does what it says) share:
running trainyard, small datasets and corpora, and the test runner (which
keeps compile caches out of the user's ~/.cache). Standard library only."""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from unittest_exit import exit_code  # noqa: E402,F401 (for the scripts here)

CFG = None  # --trainyard, --models, ... (main)


def checkpoint_bytes(path):
    """A checkpoint file's bytes for comparing two runs: a safetensors file
    without the run id in its metadata (random per run, docs/formats.md
    "Run identity"), its header re-serialized; any other file as it is."""
    with open(path, "rb") as f:
        data = f.read()
    if not path.endswith(".safetensors"):
        return data
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    header.get("__metadata__", {}).pop("trainyard_run_id", None)
    return json.dumps(header, sort_keys=True).encode() + data[8 + n:]

WORDS = "the cat sat on a mat and the dog ran to the park while birds sang in trees".split()


def stacks_of(pid):
    """The threads' stacks of process `pid` and its descendants (gdb), for
    the message of a command that hung; '' when gdb is not there."""
    gdb = shutil.which("gdb")
    if not gdb:
        return ""
    out = []
    for p in [pid] + _descendants(pid):
        r = subprocess.run([gdb, "-p", str(p), "-batch", "-nx", "-ex", "thread apply all bt"],
                           capture_output=True, text=True, timeout=120)
        out.append(f"--- pid {p}\n{r.stdout[-6000:]}")
    return "\n".join(out)


def run(args, stdin=None, env=None, timeout=300):
    """Runs trainyard; a run that outlives `timeout` fails the test with the
    stacks of every thread of it and of its children (a hang is a bug, and
    one seen once in CI must say where it hung)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    with subprocess.Popen([CFG.trainyard] + args, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=full_env) as proc:
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            stacks = stacks_of(proc.pid)
            for p in [proc.pid] + _descendants(proc.pid):
                try:
                    os.kill(p, 9)
                except OSError:
                    pass
            proc.communicate()
            raise AssertionError(f"trainyard {' '.join(args)} hung for {timeout} s; "
                                 f"stacks:\n{stacks}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _descendants(pid):
    found, i = [pid], 0
    while i < len(found):
        try:
            with open(f"/proc/{found[i]}/task/{found[i]}/children") as f:
                found += [int(c) for c in f.read().split()]
        except OSError:
            pass
        i += 1
    return found[1:]


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def make_ids_dataset(path, docs=150, vocab=96, val_fraction="0.2"):
    """Pre-tokenized documents (arithmetic progressions of ids), prepared with
    seq_len 16; no val split declared rows with val_fraction None."""
    rng = random.Random(1)
    with open(path + ".jsonl", "w") as f:
        for _ in range(docs):
            start, step, n = rng.randrange(vocab - 6), rng.choice([1, 2, 3]), rng.randrange(8, 30)
            f.write(json.dumps([(start + i * step) % (vocab - 6) for i in range(n)]) + "\n")
    args = ["data", "prepare", "--format", "ids", "--vocab-size", str(vocab), "--eos-id",
            str(vocab - 1), "--input", path + ".jsonl", "--seq-len", "16", "--out", path]
    if val_fraction:
        args += ["--val-fraction", val_fraction]
    r = run(args)
    assert r.returncode == 0, r.stderr
    return path


def make_chat_ids(path, docs=60, seed=3, vocab=96):
    """Chat-like documents of fixture ids: a masked prompt (weights 0) between
    two markers, then a learnable answer (weights 1), prepared with seq_len 16
    and a val split."""
    rng = random.Random(seed)
    with open(path + ".jsonl", "w") as f:
        for _ in range(docs):
            prompt = [rng.randrange(vocab - 6) for _ in range(rng.randrange(3, 10))]
            start, step = rng.randrange(vocab - 6), rng.choice([1, 2, 3])
            answer = [(start + i * step) % (vocab - 6) for i in range(rng.randrange(5, 20))]
            ids = [vocab - 3] + prompt + [vocab - 2] + answer
            weights = [0] * (len(prompt) + 2) + [1] * len(answer)
            f.write(json.dumps({"ids": ids, "weights": weights}) + "\n")
    r = run(["data", "prepare", "--format", "ids", "--vocab-size", str(vocab), "--eos-id",
             str(vocab - 1), "--loss-weights", "--input", path + ".jsonl", "--seq-len", "16",
             "--val-fraction", "0.1", "--out", path])
    assert r.returncode == 0, r.stderr
    return path


def make_corpus(path, lines=300, seed=1, words=WORDS):
    """Lines of 5 to 15 random words, one sentence each."""
    rng = random.Random(seed)
    return write(path, "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(5, 15)))
                                 + "." for _ in range(lines)) + "\n")


def train_tiny_model(folder, steps=1, specials=(), preset="gpt2-tiny"):
    """A `preset` checkpoint with a tokenizer: a 300-token byte-level
    tokenizer (plus `specials`) trained on a small corpus, `steps` training
    steps. Returns the checkpoint folder (config.json, model.safetensors,
    tokenizer.json)."""
    corpus = make_corpus(os.path.join(folder, "c.txt"))
    tok = os.path.join(folder, "tok.json")
    special_args = [a for s in specials for a in ("--special", s)]
    for args in (["data", "train-tokenizer", "--input", corpus, "--vocab-size", "300",
                  "--out", tok] + special_args,
                 ["data", "prepare", "--tokenizer", tok, "--input", corpus, "--seq-len", "16",
                  "--out", os.path.join(folder, "data")],
                 ["train", "--preset", preset, "--data", os.path.join(folder, "data"),
                  "--tokenizer", tok, "--out", os.path.join(folder, "run"), "--max-steps",
                  str(steps), "--cache-dir", "none"]):
        r = run(args)
        assert r.returncode == 0, r.stderr
    return os.path.join(folder, "run", "checkpoint-%d" % steps)


class TempDirTest(unittest.TestCase):
    """A test with a temporary folder of its own, removed afterwards."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ty_cli_test_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)


class FixtureTrainTest(TempDirTest):
    """Short training runs of a model fixture (CFG.models/<family>) on the
    chat-ids data set, for the memory levers' tests."""

    def ty(self, *args, rc=0):
        r = run(list(args))
        self.assertEqual(r.returncode, rc, (args, r.stdout[-2000:], r.stderr[-3000:]))
        return r

    def train(self, family, out, *extra, rc=0, steps_=20):
        if not hasattr(self, "data"):
            self.data = make_chat_ids(self.path("data"))
        return self.ty("train", "--model", os.path.join(CFG.models, family), "--data",
                       self.data, "--out", self.path(out), "--max-steps", str(steps_),
                       "--batch-size", "8", "--dropout", "0.1", "--lr", "2e-3",
                       "--warmup-steps", "2", "--cache-dir", "none", *extra, rc=rc)


def main(*options):
    """Parses --trainyard and `options` (each required) into CFG and runs the
    unittest classes named on the command line."""
    global CFG
    parser = argparse.ArgumentParser()
    for option in ("--trainyard",) + options:
        parser.add_argument(option, required=True)
    CFG, rest = parser.parse_known_args()
    cache = tempfile.mkdtemp(prefix="ty_test_xdg_")
    os.environ["XDG_CACHE_HOME"] = cache
    try:
        result = unittest.main(module="__main__", argv=[sys.argv[0]] + rest, exit=False,
                               verbosity=2).result
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return exit_code(result)  # 77 when a test skipped
