#!/usr/bin/env python3
"""Every input validated (issue 12, "hangs and unbounded work", "silent
acceptance of bad input" and "unclear errors"): end-to-end tests of
`trainyard` on inputs that used to be accepted silently, read without end or
refused with an error in the wrong terms. Python standard library only.

usage: test_inputs_cli.py --trainyard EXE --models DIR --tokenizers DIR [unittest args]
(helpers shared with test_options_cli.py: cli_util.py)

- DatasetTest: a val split declared in dataset.json whose shard is missing
  or a folder is an error naming the shard, in `data info`, `data info
  --verify`, `train` and `compile`; only a dataset.json without the split
  means "no validation".
- FileErrorTest: a folder where a file belongs, a file where a folder
  belongs and a missing folder are reported with the user's path (never a
  temporary name) and the code of the cause (never DATA_LOSS or UNKNOWN).
- TokenizerTest: `train --tokenizer` refuses a tokenizer other than the
  data's (both hashes named) or one that does not load.
- TrainTokenizerInputTest: `data train-tokenizer` refuses empty or
  too-small input, and what it writes always loads in `data prepare`.
- ForwardTest: rows of one token report no loss instead of 0.
- ListTest: an empty item of a comma-separated option is a usage error.
- ReadTest: every file Trainyard reads whole has a cap and refuses NUL bytes
  in text: /dev/zero as a tokenizer, a config.json, a --config file or a
  data input fails at once (it used to read until the kernel killed the
  host's memory, or spin forever); an endless pipe stops at the cap named in
  the message; a finite pipe works; a NUL byte is an error at its offset,
  never an end of line or file.
- ModelTest: config.json is checked against the checkpoint before any graph
  is built (n_layer = 100000 or 2^63-1 against a 2-layer checkpoint fails in
  well under a second, naming the tensor); sizes past 64-bit arithmetic or
  the device's memory are refused; NaN/Inf weights are refused by forward,
  generate and train (naming tensor and element) unless --allow-nonfinite,
  which loads them with a loud warning.
- ConfigTest: conflicting RoPE forms, unknown enum values and token ids
  outside the vocabulary in config.json are refused.
- TokenizerFileTest: an empty vocabulary and merges whose result is not in
  the vocabulary are refused; `data prepare --format ids` records its format.
"""
import hashlib
import json
import os
import random
import shutil
import struct
import sys
import threading
import time

import cli_util  # noqa: E402  (beside this file)
from cli_util import WORDS, make_corpus, make_ids_dataset, run, write  # noqa: E402,F401

FAST = 10  # seconds: every refusal of ReadTest and ModelTest is immediate; the old
           # behaviour never ended


def run_fast(args, stdin=None, env=None, timeout=FAST):
    return run(args, stdin, env, timeout)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), 8 + n, bytearray(raw)


def poke_f32(path, tensor, index, value):
    """Writes float32 `value` at element `index` of `tensor` in a safetensors file."""
    header, base, raw = read_safetensors(path)
    entry = header[tensor]
    assert entry["dtype"] == "F32", entry
    at = base + entry["data_offsets"][0] + 4 * index
    raw[at:at + 4] = struct.pack("<f", value)
    with open(path, "wb") as f:
        f.write(raw)


class Base(cli_util.TempDirTest):
    def fails(self, r, rc, *needles):
        """Result `r` exited with `rc` and its stderr holds every needle."""
        self.assertEqual(r.returncode, rc, "trainyard %s\nstdout: %s\nstderr: %s" % (
            " ".join(r.args[1:]), r.stdout[-2000:], r.stderr[-3000:]))
        for needle in needles:
            self.assertIn(needle, r.stderr)
        return r

    def expect(self, args, rc, *needles, stdin=None):
        return self.fails(run(args, stdin), rc, *needles)

    def copy_dataset(self, src, name):
        dst = self.path(name)
        shutil.copytree(src, dst)
        return dst

    def model(self, family="gpt2", edit=None):
        """A copy of a fixture model; `edit(config_dict)` changes its config.json."""
        dst = self.path("model-" + family)
        shutil.copytree(os.path.join(cli_util.CFG.models, family), dst)
        if edit:
            cfg_path = os.path.join(dst, "config.json")
            with open(cfg_path) as f:
                cfg = json.load(f)
            edit(cfg)
            with open(cfg_path, "w") as f:
                json.dump(cfg, f)
        return dst

    def tokens(self, ids=((1, 5, 9, 20),)):
        p = self.path("tokens.json")
        with open(p, "w") as f:
            json.dump([list(r) for r in ids], f)
        return p

    def forward(self, model, *extra):
        return run_fast(["forward", "--model", model, "--tokens", self.tokens(), "--out",
                         self.path("out.safetensors")] + list(extra))


class DatasetTest(Base):
    def setUp(self):
        super().setUp()
        self.data = make_ids_dataset(self.path("data"))

    def test_missing_val_shard_is_an_error_everywhere(self):
        broken = self.copy_dataset(self.data, "noval")
        shard = os.path.join(broken, "val-00000.tyds")
        os.remove(shard)
        message = "is incomplete: shard %s of the val split" % shard
        for args in (["data", "info", broken], ["data", "info", broken, "--verify"],
                     ["train", "--preset", "gpt2-tiny", "--data", broken, "--out",
                      self.path("run"), "--max-steps", "1", "--batch-size", "2"]):
            r = self.expect(args, 1, "DATA_LOSS", message)
            self.assertNotIn("every byte verified", r.stdout)
            self.assertNotIn("0 val rows", r.stderr)

    def test_shard_that_is_a_folder(self):
        broken = self.copy_dataset(self.data, "dirshard")
        shard = os.path.join(broken, "val-00000.tyds")
        os.remove(shard)
        os.mkdir(shard)
        r = self.expect(["data", "info", broken], 1, "FAILED_PRECONDITION",
                        shard + " is a folder, not a file")
        self.assertNotIn("No such device", r.stderr)
        train_shard = os.path.join(broken, "train-00000.tyds")
        os.remove(train_shard)
        os.mkdir(train_shard)
        self.expect(["compile", "--backend", "dataflow", "--preset", "gpt2-tiny", "--data",
                     broken, "--batch-size", "2", "--out", self.path("a.tyart")], 1,
                    train_shard + " is a folder, not a file")

    def test_undeclared_val_split_means_none(self):
        data = self.copy_dataset(self.data, "trainonly")
        meta_path = os.path.join(data, "dataset.json")
        with open(meta_path) as f:
            meta = json.load(f)
        for shard in meta["splits"].pop("val")["shards"]:
            os.remove(os.path.join(data, shard["file"]))
        with open(meta_path, "w") as f:
            json.dump(meta, f)
        r = self.expect(["data", "info", data, "--verify"], 0)
        self.assertIn("every byte verified", r.stdout)
        self.assertNotIn("val ", r.stdout)
        r = self.expect(["train", "--preset", "gpt2-tiny", "--data", data, "--out",
                         self.path("run"), "--max-steps", "1", "--batch-size", "2"], 0)
        self.assertIn(" 0 val rows", r.stderr)

    def test_dataset_path_that_is_a_file_or_missing(self):
        afile = write(self.path("afile"), "x")
        self.expect(["data", "info", afile], 1, "FAILED_PRECONDITION",
                    afile + " is a file, not a dataset folder")
        self.expect(["data", "info", self.path("nothere")], 1, "NOT_FOUND", "nothere")
        self.expect(["data", "info", os.path.join(afile, "sub")], 1, "FAILED_PRECONDITION",
                    "Not a directory")


class FileErrorTest(Base):
    """Each case: the command, its exit code, the code and the words the
    error must hold; none may say DATA_LOSS, UNKNOWN or a temporary name."""

    def check(self, args, rc, code, *needles):
        r = self.expect(args, rc, *needles)
        if code:
            self.assertIn(code, r.stderr)
        for bad in ("DATA_LOSS", "UNKNOWN", ".tmp", "No such device"):
            self.assertNotIn(bad, r.stderr, "trainyard %s" % " ".join(args))
        return r

    def test_wrong_kind_of_file_and_missing_folders(self):
        gpt2 = os.path.join(cli_util.CFG.models, "gpt2")
        afile = write(self.path("afile"), "x")
        folder = self.path("folder")
        os.mkdir(folder)
        tokens = write(self.path("tokens.json"), "[[1, 2, 3]]")
        data = make_ids_dataset(self.path("data"))
        tok = self.path("tok.json")
        corpus = write(self.path("corpus.txt"), "the cat sat on the mat. " * 200)
        self.expect(["data", "train-tokenizer", "--input", corpus, "--vocab-size", "300",
                     "--out", tok], 0)
        broken_model = self.path("model_cfg_folder")
        os.makedirs(os.path.join(broken_model, "config.json"))
        weights_folder = self.path("model_weights_folder")
        os.mkdir(weights_folder)
        shutil.copy(os.path.join(gpt2, "config.json"), weights_folder)
        os.mkdir(os.path.join(weights_folder, "model.safetensors"))
        fwd = ["forward", "--model", gpt2, "--tokens", tokens, "--out"]
        cases = [
            (["forward", "--model", gpt2, "--tokens", self.path("none.json"), "--out",
              self.path("o.st")], "NOT_FOUND", "cannot read --tokens file"),
            (["forward", "--model", gpt2, "--tokens", folder, "--out", self.path("o.st")],
             "FAILED_PRECONDITION", "--tokens file %s is a folder, not a file" % folder),
            (fwd + [self.path("nodir", "o.st")], "NOT_FOUND",
             "cannot write safetensors file %s: its folder %s does not exist" % (
                 self.path("nodir", "o.st"), self.path("nodir"))),
            (fwd + [folder], "FAILED_PRECONDITION", "a folder of that name is in the way"),
            (fwd + [os.path.join(afile, "o.st")], "FAILED_PRECONDITION",
             "%s is not a folder" % afile),
            (["forward", "--model", afile, "--tokens", tokens, "--out", self.path("o.st")],
             "FAILED_PRECONDITION", "%s is a file, not a model folder" % afile),
            (["forward", "--model", broken_model, "--tokens", tokens, "--out",
              self.path("o.st")], "FAILED_PRECONDITION", "config.json is a folder, not a file"),
            (["forward", "--model", weights_folder, "--tokens", tokens, "--out",
              self.path("o.st")], "FAILED_PRECONDITION",
             "model.safetensors is a folder, not a file"),
            (["data", "prepare", "--tokenizer", tok, "--input", corpus, "--seq-len", "8",
              "--out", self.path("nodir", "sub", "ds")], "NOT_FOUND",
             "cannot write dataset folder %s: its folder %s does not exist" % (
                 self.path("nodir", "sub", "ds"), self.path("nodir", "sub"))),
            (["data", "prepare", "--tokenizer", tok, "--input", corpus, "--seq-len", "8",
              "--out", os.path.join(afile, "ds")], "FAILED_PRECONDITION",
             "%s is not a folder" % afile),
            (["data", "prepare", "--tokenizer", os.path.join(afile, "t.json"), "--input",
              corpus, "--seq-len", "8", "--out", self.path("ds2")], "FAILED_PRECONDITION",
             "Not a directory"),
            (["data", "train-tokenizer", "--input", corpus, "--vocab-size", "300", "--out",
              os.path.join(afile, "t.json")], "FAILED_PRECONDITION", "afile"),
            (["train", "--preset", "gpt2-tiny", "--data", data, "--backend", "dataflow",
              "--artifact", os.path.join(afile, "x.tyart"), "--out", self.path("r1"),
              "--max-steps", "1", "--batch-size", "2"], "FAILED_PRECONDITION",
             "Not a directory"),
        ]
        for args, code, needle in cases:
            with self.subTest(args=" ".join(args)):
                self.check(args, 1, code, needle)
        # conform: a folder as --xfail was read as an empty list
        self.check(["conform", "--backend", "cpu", "--ops", "add", "--xfail", folder], 2, None,
                   "--xfail file %s is a folder, not a file" % folder)

    def test_optional_files_that_are_there_but_broken(self):
        """A tokenizer.json that is there but cannot be read is an error, not
        "no tokenizer" (generate and train skipped it silently)."""
        model = self.path("model")
        shutil.copytree(os.path.join(cli_util.CFG.models, "gpt2"), model)
        os.symlink(self.path("gone.json"), os.path.join(model, "tokenizer.json"))
        self.check(["generate", "--model", model, "--prompt-ids", "1,2", "--max-new-tokens", "2"],
                   1, "NOT_FOUND", os.path.join(model, "tokenizer.json"))
        data = make_ids_dataset(self.path("data"))
        os.symlink(self.path("gone.json"), os.path.join(data, "tokenizer.json"))
        self.check(["train", "--preset", "gpt2-tiny", "--data", data, "--out", self.path("run"),
                    "--max-steps", "1", "--batch-size", "2"], 1, "NOT_FOUND",
                   os.path.join(data, "tokenizer.json"))
        self.assertFalse(os.path.exists(self.path("run", "checkpoint-1")))

    def test_run_folder_files_of_the_wrong_kind(self):
        data = make_ids_dataset(self.path("data"))
        out = self.path("run")
        os.makedirs(os.path.join(out, "summary.txt"))
        self.check(["train", "--preset", "gpt2-tiny", "--data", data, "--out", out,
                    "--max-steps", "1", "--batch-size", "2"], 1, "FAILED_PRECONDITION",
                   "summary.txt is a folder, not the file a training run writes there")
        ckpt = self.path("ckpt")
        os.makedirs(os.path.join(ckpt, "trainer_state.json"))
        self.check(["train", "--preset", "gpt2-tiny", "--data", data, "--out", self.path("r2"),
                    "--max-steps", "1", "--batch-size", "2", "--resume", ckpt], 1,
                   "FAILED_PRECONDITION", "trainer_state.json is a folder, not a file")


def make_text_dataset(base, tokenizer_vocab="320", seed=1, words=WORDS, val_fraction="0.1"):
    """A trained tokenizer and a dataset prepared with it: (tokenizer, data)."""
    corpus = make_corpus(base + ".txt", lines=400, seed=seed, words=words)
    tok = base + ".tokenizer.json"
    r = run(["data", "train-tokenizer", "--input", corpus, "--format", "lines", "--vocab-size",
             tokenizer_vocab, "--out", tok])
    assert r.returncode == 0, r.stderr
    data = base + ".data"
    r = run(["data", "prepare", "--tokenizer", tok, "--input", corpus, "--format", "lines",
             "--seq-len", "16", "--val-fraction", val_fraction, "--out", data])
    assert r.returncode == 0, r.stderr
    return tok, data


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class TokenizerTest(Base):
    def train(self, *args, rc=0, needles=()):
        return self.expect(["train", "--preset", "gpt2-tiny", "--max-steps", "2", "--batch-size",
                            "2"] + list(args), rc, *needles)

    def test_tokenizer_other_than_the_datas_is_refused(self):
        tok_a, data_a = make_text_dataset(self.path("a"))
        other_words = "zebra quartz jumps over lazy wolves and foxes near rivers".split()
        tok_b, _ = make_text_dataset(self.path("b"), tokenizer_vocab="320", seed=2,
                                     words=other_words)
        tok_c, _ = make_text_dataset(self.path("c"), tokenizer_vocab="290", seed=3)
        for tok in (tok_b, tok_c):
            with self.subTest(tokenizer=os.path.basename(tok)):
                out = self.path("run_" + os.path.basename(tok))
                r = self.train("--data", data_a, "--tokenizer", tok, "--out", out, rc=1,
                               needles=("INVALID_ARGUMENT", "is not the tokenizer the data was "
                                        "prepared with", sha256(tok), sha256(tok_a)))
                self.assertIn("vocabulary", r.stderr)
                self.assertFalse(any(n.startswith("checkpoint-") for n in os.listdir(out))
                                 if os.path.isdir(out) else False)
        # the same check for a tokenizer.json found in the data folder
        data_copy = self.copy_dataset(data_a, "data_with_tok")
        shutil.copy(tok_b, os.path.join(data_copy, "tokenizer.json"))
        self.train("--data", data_copy, "--out", self.path("run_implicit"), rc=1,
                   needles=("the data folder's tokenizer", sha256(tok_b)))
        # the right one: its exact bytes in every checkpoint
        out = self.path("run_ok")
        self.train("--data", data_a, "--tokenizer", tok_a, "--out", out)
        self.assertEqual(sha256(os.path.join(out, "checkpoint-2", "tokenizer.json")),
                         sha256(tok_a))

    def test_tokenizer_that_does_not_load_is_refused(self):
        tok_a, data_a = make_text_dataset(self.path("a"))
        bad = write(self.path("bad.json"), '{"model": {"type": "BPE"}}')
        out = self.path("run")
        self.train("--data", data_a, "--tokenizer", bad, "--out", out, rc=1,
                   needles=("--tokenizer %s does not load" % bad,))
        self.assertFalse(os.path.exists(os.path.join(out, "checkpoint-2")))
        self.train("--data", data_a, "--tokenizer", self.path("none.json"), "--out", out, rc=1,
                   needles=("NOT_FOUND", "none.json"))

    def test_ids_data_needs_a_tokenizer_of_its_vocabulary(self):
        tok_a, _ = make_text_dataset(self.path("a"))
        with open(tok_a) as f:
            meta = json.load(f)
        vocab = 1 + max(list(meta["model"]["vocab"].values()) +
                        [t["id"] for t in meta["added_tokens"]])
        ids = make_ids_dataset(self.path("ids"), vocab=96)
        self.train("--data", ids, "--tokenizer", tok_a, "--out", self.path("run"), rc=1,
                   needles=("has a vocabulary of %d tokens, but the data in" % vocab, "has 96"))


class TrainTokenizerInputTest(Base):
    def test_empty_or_too_small_input_is_refused(self):
        empty = write(self.path("empty.txt"), "")
        blank = write(self.path("blank.txt"), "  \n\n")
        tiny = write(self.path("tiny.txt"), "hello")
        out = self.path("tok.json")
        for inputs, needle in (([empty], "holds no text"), ([blank], "holds no text"),
                               ([empty, blank], "(2 files, 0 documents) holds no text"),
                               ([tiny], "too small to learn any merge")):
            args = ["data", "train-tokenizer", "--vocab-size", "300", "--out", out]
            for i in inputs:
                args += ["--input", i]
            self.expect(args, 1, "INVALID_ARGUMENT", needle)
            self.assertFalse(os.path.exists(out))
        # asking for no merges at all is not "too small"
        self.expect(["data", "train-tokenizer", "--input", tiny, "--vocab-size", "257", "--out",
                     out], 0)
        self.expect(["data", "prepare", "--tokenizer", out, "--input", tiny, "--seq-len", "4",
                     "--out", self.path("ds")], 0)

    def test_what_it_writes_loads_in_data_prepare(self):
        rng = random.Random(3)
        words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
        for n, vocab, special in ((3, "260", []), (40, "300", ["<|im_start|>", "<|im_end|>"]),
                                  (400, "400", ["<pad>"])):
            with self.subTest(words=n, vocab=vocab):
                corpus = write(self.path("c%d.txt" % n),
                               " ".join(rng.choice(words) for _ in range(n)))
                out = self.path("tok%d.json" % n)
                args = ["data", "train-tokenizer", "--input", corpus, "--vocab-size", vocab,
                        "--min-frequency", "1", "--out", out]
                for sp in special:
                    args += ["--special", sp]
                self.expect(args, 0)
                self.expect(["data", "prepare", "--tokenizer", out, "--input", corpus,
                             "--seq-len", "4", "--out", self.path("ds%d" % n)], 0)


class ForwardTest(Base):
    def test_one_token_rows_report_no_loss(self):
        gpt2 = os.path.join(cli_util.CFG.models, "gpt2")
        tokens = write(self.path("one.json"), "[[5], [7]]")
        out = self.path("one.safetensors")
        r = self.expect(["-v", "forward", "--model", gpt2, "--tokens", tokens, "--out", out], 0,
                        "no position is predicted", "no loss")
        self.assertNotIn("loss 0.0", r.stderr)
        with open(out, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
        self.assertIn("logits", header)
        self.assertNotIn("loss", header)  # no made-up 0
        self.expect(["forward", "--model", gpt2, "--tokens", tokens, "--out", out, "--grads"], 1,
                    "INVALID_ARGUMENT", "no loss to differentiate")
        # two tokens: a loss, and a real one
        two = write(self.path("two.json"), "[[5, 6]]")
        r = self.expect(["-v", "forward", "--model", gpt2, "--tokens", two, "--out", out], 0)
        loss = float(r.stderr.split("loss ")[1].split(",")[0])
        self.assertGreater(loss, 0.5)


class ListTest(Base):
    def test_empty_items_are_usage_errors(self):
        gpt2 = os.path.join(cli_util.CFG.models, "gpt2")
        data = make_ids_dataset(self.path("data"))
        for value, item in (("1,,2", "item 2 of 3 is empty"), ("1,2,", "item 3 of 3 is empty"),
                            (",1", "item 1 of 2 is empty"), ("1, ,2", "item 2 of 3 is empty"),
                            ("", "--prompt-ids is empty")):
            with self.subTest(value=value):
                self.expect(["generate", "--model", gpt2, "--prompt-ids", value,
                             "--max-new-tokens", "2"], 2, "--prompt-ids", item)
        self.expect(["generate", "--model", gpt2, "--prompt-ids", "1,x", "--max-new-tokens", "2"],
                    2, "item 2, 'x', is not a token id")
        self.expect(["generate", "--model", gpt2, "--prompt-ids", "1,-3", "--max-new-tokens",
                     "2"], 2, "is not a token id")
        for value, item in (("cpu,,dataflow", "item 2 of 3 is empty"),
                            ("cpu,dataflow,", "item 3 of 3 is empty")):
            with self.subTest(value=value):
                self.expect(["compare", "--backends", value, "--steps", "1", "--preset",
                             "gpt2-tiny", "--data", data, "--out", self.path("cmp")], 2,
                            "--backends", item)
        self.assertFalse(os.path.exists(self.path("cmp")))
        # spaces around items are fine; the items are what was asked for
        r = self.expect(["generate", "--model", gpt2, "--prompt-ids", "1, 2,3", "--max-new-tokens",
                         "2", "--json"], 0, "3 prompt + 2 new tokens")
        self.assertEqual(len(json.loads(r.stdout)["ids"]), 2)


class ReadTest(Base):
    def test_dev_zero_tokenizer_fails_at_once(self):
        r = run_fast(["tokenize", "--tokenizer", "/dev/zero"], stdin="hi")
        self.fails(r, 1, "tokenizer file /dev/zero holds a NUL byte at offset 0")

    def test_dev_zero_config_json_fails_at_once(self):
        model = self.model()
        cfg = os.path.join(model, "config.json")
        os.remove(cfg)
        os.symlink("/dev/zero", cfg)
        self.fails(self.forward(model), 1, "config.json holds a NUL byte at offset 0")

    def test_dev_zero_train_config_fails_at_once(self):
        data = make_ids_dataset(self.path("data"))
        r = run_fast(["train", "--config", "/dev/zero", "--preset", "gpt2-tiny", "--data", data,
                      "--out", self.path("run")])
        self.fails(r, 2, "config file /dev/zero holds a NUL byte at offset 0")

    def test_byte_order_mark_is_skipped_in_every_json_input(self):
        """Issue 33: a UTF-8 byte-order mark at the start of a JSON, JSONL or
        options file (as Windows editors save them) is skipped, never "'['
        or '{' expected near ..."; the results equal those without it."""
        bom = b"\xef\xbb\xbf"

        def with_bom(src, dst):
            with open(src, "rb") as f, open(dst, "wb") as g:
                g.write(bom + f.read())
            return dst
        # config.json of a model and a forward --tokens file
        model = self.model()
        plain = self.forward(model)
        self.fails(plain, 0)
        with open(self.path("out.safetensors"), "rb") as f:
            want = f.read()
        cfg = os.path.join(model, "config.json")
        os.replace(with_bom(cfg, cfg + ".bom"), cfg)
        tokens = with_bom(self.tokens(), self.path("tokens-bom.json"))
        r = run_fast(["forward", "--model", model, "--tokens", tokens, "--out",
                      self.path("bom.safetensors")])
        self.fails(r, 0)
        with open(self.path("bom.safetensors"), "rb") as f:
            self.assertEqual(f.read(), want)
        # tokenizer.json, and JSON ids on stdin
        tok = with_bom(os.path.join(cli_util.CFG.tokenizers, "gpt2", "tokenizer.json"),
                       self.path("tokenizer.json"))
        r = run_fast(["tokenize", "--tokenizer", tok], stdin="hello world")
        self.fails(r, 0)
        ids = r.stdout.split()
        r = run_fast(["tokenize", "--tokenizer", tok, "--decode"],
                     stdin="\ufeff" + json.dumps([int(i) for i in ids]))
        self.fails(r, 0)
        self.assertEqual(r.stdout.rstrip("\n"), "hello world")
        # a train --config file, and JSONL inputs of data prepare
        lines = "".join(json.dumps([i % 90, (i + 1) % 90, (i + 2) % 90, 7, 8, 9, 10, 11, 12])
                        + "\n" for i in range(60))
        src = write(self.path("ids.jsonl"), lines)
        prepare = ["data", "prepare", "--format", "ids", "--vocab-size", "96", "--eos-id", "95",
                   "--seq-len", "8"]
        self.fails(run(prepare + ["--input", src, "--out", self.path("d1")]), 0)
        self.fails(run(prepare + ["--input", with_bom(src, self.path("ids-bom.jsonl")),
                                  "--out", self.path("d2")]), 0)
        with open(self.path("d1", "dataset.json")) as a, open(self.path("d2", "dataset.json")) as b:
            self.assertEqual(json.load(a)["splits"], json.load(b)["splits"])
        config = self.path("run.cfg")
        with open(config, "wb") as f:
            f.write(bom + b"preset = gpt2-tiny\nmax_steps = 1\n")
        r = run(["train", "--config", config, "--data", self.path("d1"), "--out",
                 self.path("run"), "--cache-dir", "none", "--batch-size", "2"])
        self.fails(r, 0)

    def test_nul_in_train_config_is_not_an_end_of_line(self):
        cfg = self.path("run.cfg")
        with open(cfg, "wb") as f:
            f.write(b"preset = gpt2-tiny\nmax_steps = 1\x00\nlr = 1e-3\n")
        r = run_fast(["train", "--config", cfg, "--data", make_ids_dataset(self.path("data")),
                      "--out", self.path("run")])
        self.fails(r, 2, "holds a NUL byte at offset 32")

    def test_long_line_in_train_config_is_one_line(self):
        # fgets(2048) cut long lines in two; the tail became a line of its own.
        cfg = self.path("run.cfg")
        with open(cfg, "w") as f:
            f.write("# " + "x" * 3000 + "\nbogus_option = 1\n")
        r = run_fast(["train", "--config", cfg, "--preset", "gpt2-tiny", "--data",
                      make_ids_dataset(self.path("data")), "--out", self.path("run")])
        self.fails(r, 2, "run.cfg:2: unknown option 'bogus_option'")

    def test_endless_pipe_stops_at_the_cap(self):
        fifo = self.path("fifo")
        os.mkfifo(fifo)
        stop = threading.Event()

        def writer():
            try:
                with open(fifo, "wb") as f:
                    chunk = b"{" * 65536
                    while not stop.is_set():
                        f.write(chunk)
            except (BrokenPipeError, OSError):
                pass

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        try:
            r = run_fast(["tokenize", "--tokenizer", fifo], stdin="hi",
                         env={"TRAINYARD_MAX_TOKENIZER_BYTES": "1M"})
        finally:
            stop.set()
        self.fails(r, 1, "RESOURCE_EXHAUSTED", "larger than 1 MiB",
                   "TRAINYARD_MAX_TOKENIZER_BYTES")

    def test_tokenizer_through_a_pipe_works(self):
        fifo = self.path("fifo")
        os.mkfifo(fifo)
        src = os.path.join(cli_util.CFG.tokenizers, "gpt2", "tokenizer.json")

        def writer():
            with open(fifo, "wb") as out, open(src, "rb") as f:
                shutil.copyfileobj(f, out)

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        r = run_fast(["tokenize", "--tokenizer", fifo], stdin="Hello world")
        t.join()
        self.assertEqual(r.returncode, 0, r.stderr)
        ref = run_fast(["tokenize", "--tokenizer", src], stdin="Hello world")
        self.assertEqual(r.stdout, ref.stdout)

    def test_bad_cap_setting_is_named(self):
        tok = os.path.join(cli_util.CFG.tokenizers, "gpt2", "tokenizer.json")
        r = run_fast(["tokenize", "--tokenizer", tok], stdin="x",
                     env={"TRAINYARD_MAX_TOKENIZER_BYTES": "lots"})
        self.fails(r, 1, "TRAINYARD_MAX_TOKENIZER_BYTES='lots' is not a size")

    def test_nul_on_stdin(self):
        tok = os.path.join(cli_util.CFG.tokenizers, "gpt2", "tokenizer.json")
        r = run_fast(["tokenize", "--tokenizer", tok], stdin="ab\0cd")
        self.fails(r, 1, "input stdin holds a NUL byte at offset 2")

    def test_data_inputs_devices_pipes_and_nul(self):
        tok = os.path.join(cli_util.CFG.tokenizers, "gpt2", "tokenizer.json")
        base = ["data", "prepare", "--tokenizer", tok, "--format", "lines", "--seq-len", "8"]
        # /dev/zero used to look like an empty file (st_size 0).
        r = run_fast(base + ["--input", "/dev/zero", "--out", self.path("d0")])
        self.fails(r, 1, "input /dev/zero holds a NUL byte at offset 0")
        text = self.path("nul.txt")
        with open(text, "wb") as f:
            f.write(b"one line\nanother\x00line\n")
        r = run_fast(base + ["--input", text, "--out", self.path("d1")])
        self.fails(r, 1, "holds a NUL byte at offset 16")
        fifo = self.path("lines.fifo")
        os.mkfifo(fifo)

        def writer():
            with open(fifo, "w") as f:
                for i in range(50):
                    f.write("line number %d of a piped corpus\n" % i)

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        r = run_fast(base + ["--input", fifo, "--out", self.path("d2")])
        t.join()
        self.assertEqual(r.returncode, 0, r.stderr)
        info = run_fast(["data", "info", self.path("d2")])
        self.assertEqual(info.returncode, 0, info.stderr)

    def test_xfail_list_is_not_cut_at_1_mib(self):
        big = self.path("xfail.txt")
        with open(big, "w") as f:
            f.write("# padding\n" * 110000)  # 1.1 MB of comments
            f.write("gelu f32 forward\n")    # no reason: an error past the first MiB
        r = run_fast(["conform", "--backend", "cpu", "--ops", "gelu", "--xfail", big])
        self.fails(r, 2, "--xfail file", "larger than 1 MiB")


class ModelTest(Base):
    def test_many_more_layers_than_the_checkpoint(self):
        for family, key, value in (("gpt2", "n_layer", 100000),
                                   ("llama", "num_hidden_layers", 100000)):
            model = self.model(family, lambda c: c.__setitem__(key, value))
            start = time.monotonic()
            r = self.forward(model)
            self.assertLess(time.monotonic() - start, 5)
            layer = "transformer.h.2.ln_1.weight" if family == "gpt2" else \
                "model.layers.2.input_layernorm.weight"
            self.fails(r, 1, "NOT_FOUND", "has no tensor '%s'" % layer, "100000 layers")
            r = run_fast(["generate", "--model", model, "--prompt-ids", "1,2", "--max-new-tokens",
                          "2"])
            self.fails(r, 1, "has no tensor '%s'" % layer)
            # check and compile build graphs from a config alone; weights beside
            # it are checked first (cpu's memory would let the graph be built)
            for args in (["check", "--backend", "cpu"],
                         ["compile", "--backend", "cpu", "--out", self.path("a.tyart")]):
                r = run_fast(args + ["--model", model, "--batch-size", "1", "--seq-len", "4"])
                self.fails(r, 1, "has no tensor '%s'" % layer)

    def test_layer_count_past_64_bits(self):
        for family, key in (("gpt2", "n_layer"), ("llama", "num_hidden_layers")):
            model = self.model(family, lambda c: c.__setitem__(key, 2**63 - 1))
            r = self.forward(model)
            self.fails(r, 1, "INVALID_ARGUMENT", "9223372036854775807 layers", "64-bit")

    def test_fewer_layers_and_wrong_shapes_are_named(self):
        model = self.model("gpt2", lambda c: c.__setitem__("n_layer", 1))
        self.fails(self.forward(model), 1, "checkpoint tensor 'transformer.h.1.",
                   "not a parameter")
        model = self.model("llama", lambda c: c.__setitem__("intermediate_size", 48))
        self.fails(self.forward(model), 1, "model.layers.0.mlp.gate_proj.weight",
                   "[64,32]", "[48,32]")

    def test_sizes_past_the_device_memory(self):
        # A config alone (compile needs no weights): 64-bit arithmetic copes,
        # no device does.
        model = self.model("llama", lambda c: c.update(hidden_size=65536, intermediate_size=262144,
                                                       num_hidden_layers=4096, head_dim=64,
                                                       num_attention_heads=1024,
                                                       num_key_value_heads=1024))
        os.remove(os.path.join(model, "model.safetensors"))
        r = run_fast(["compile", "--backend", "dataflow", "--model", model, "--batch-size", "1",
                      "--seq-len", "8", "--out", self.path("step.tyart")])
        self.fails(r, 1, "RESOURCE_EXHAUSTED", "parameters", "GiB of device dataflow")
        r = run_fast(["check", "--backend", "dataflow", "--model", model, "--batch-size", "1",
                      "--seq-len", "8"])
        self.fails(r, 1, "RESOURCE_EXHAUSTED", "parameters", "GiB of device dataflow")

    def nan_model(self, family="gpt2", value=float("nan"), index=7):
        model = self.model(family)
        tensor = "transformer.h.1.mlp.c_fc.weight" if family == "gpt2" else \
            "model.layers.1.mlp.up_proj.weight"
        poke_f32(os.path.join(model, "model.safetensors"), tensor, index, value)
        return model, tensor

    def test_nonfinite_weights_forward(self):
        for value, word in ((float("nan"), "NaN"), (float("inf"), "+inf"),
                            (float("-inf"), "-inf")):
            model, tensor = self.nan_model(value=value)
            r = self.forward(model)
            self.fails(r, 1, "tensor '%s' holds %s at element 7" % (tensor, word),
                       "--allow-nonfinite")
            shutil.rmtree(model)
        model, tensor = self.nan_model("llama")
        r = self.forward(model, "--allow-nonfinite")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("WARNING: 1 tensor(s)", r.stderr)
        self.assertIn(tensor, r.stderr)

    def test_conversion_overflow_is_named(self):
        model, tensor = self.nan_model(value=70000.0)
        self.assertEqual(self.forward(model).returncode, 0)  # finite in f32
        r = self.forward(model, "--dtype", "f16")
        self.fails(r, 1, "tensor '%s' holds 70000 at element 7, which overflows f16" % tensor)

    def test_nonfinite_weights_generate(self):
        model, tensor = self.nan_model()
        args = ["generate", "--model", model, "--prompt-ids", "1,2,3", "--max-new-tokens", "4"]
        self.fails(run_fast(args), 1, "tensor '%s' holds NaN" % tensor)
        r = run_fast(args + ["--allow-nonfinite"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("WARNING", r.stderr)

    def test_nonfinite_weights_train(self):
        model, tensor = self.nan_model()
        data = make_ids_dataset(self.path("data"))
        base = ["train", "--model", model, "--data", data, "--max-steps", "2", "--batch-size", "2"]
        # Refused at load, naming the tensor (it used to fail later on a NaN loss).
        r = run_fast(base + ["--out", self.path("run1")], timeout=120)
        self.fails(r, 1, "tensor '%s' holds NaN at element 7" % tensor)
        r = run_fast(base + ["--out", self.path("run2"), "--allow-nonfinite"], timeout=120)
        self.assertIn("WARNING: 1 tensor(s)", r.stderr)
        # A preset starts from random weights: there is nothing for it to allow.
        r = run_fast(["train", "--preset", "gpt2-tiny", "--data", data, "--max-steps", "1",
                      "--out", self.path("run3"), "--allow-nonfinite"])
        self.fails(r, 2, "--allow-nonfinite has no effect without --model or --resume")


class ConfigTest(Base):
    def test_conflicting_rope_forms(self):
        def edit(c):
            c["rope_scaling"] = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 256}
        model = self.model("llama3", edit)  # its rope_parameters say factor 8
        self.fails(self.forward(model), 1, "rope_scaling and rope_parameters disagree on factor")

        def bad_legacy(c):
            c["rope_scaling"] = {"rope_type": "llama3", "factor": -1}
        model = self.model("llama", bad_legacy)
        shutil.rmtree(self.path("model-llama3"))
        self.fails(self.forward(model), 1, "'rope_scaling.factor' must be a positive number")

    def test_unknown_enum_values(self):
        for key, value, code in (("hidden_act", "silly", "INVALID_ARGUMENT"),
                                 ("hidden_act", 3, "INVALID_ARGUMENT"),
                                 ("dtype", "float99", "INVALID_ARGUMENT"),
                                 ("architectures", ["LlamaForTokenClassification"],
                                  "UNIMPLEMENTED")):
            model = self.model("llama", lambda c: c.__setitem__(key, value))
            self.fails(self.forward(model), 1, code, "'%s'" % key)
            shutil.rmtree(model)

    def test_eos_outside_the_vocabulary(self):
        model = self.model("gpt2", lambda c: c.__setitem__("eos_token_id", 96))
        self.fails(self.forward(model), 1, "'eos_token_id': 96 is not a token id",
                   "from 0 to 95, the vocabulary's last")

    def test_stop_at_eos_needs_an_eos(self):
        model = self.model("gpt2", lambda c: c.pop("eos_token_id"))
        r = run_fast(["generate", "--model", model, "--prompt-ids", "1", "--max-new-tokens", "2",
                      "--stop-at-eos"])
        self.fails(r, 1, "--stop-at-eos", "has no eos_token_id")


class TokenizerFileTest(Base):
    def write(self, name, obj):
        p = self.path(name)
        with open(p, "w") as f:
            json.dump(obj, f)
        return p

    def test_empty_vocabulary(self):
        tok = self.write("empty.json", {"model": {"type": "BPE", "vocab": {}, "merges": []}})
        self.fails(run_fast(["tokenize", "--tokenizer", tok], stdin="hi"), 1,
                   "model.vocab is empty")

    def test_merge_result_outside_the_vocabulary(self):
        tok = self.write("m.json", {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1},
                                              "merges": ["a b"]}})
        self.fails(run_fast(["tokenize", "--tokenizer", tok], stdin="ab"), 1,
                   "merged token \"ab\" is not in model.vocab")

    def test_ids_outside_the_vocabulary_are_refused(self):
        src = self.path("ids.jsonl")
        with open(src, "w") as f:
            f.write("[1, 2, 95]\n[3, 96, 4]\n")  # 95 is the last id; 96 is outside
        r = run_fast(["data", "prepare", "--format", "ids", "--vocab-size", "96", "--eos-id", "95",
                      "--input", src, "--seq-len", "4", "--out", self.path("out")])
        self.fails(r, 1, "token id 96 (element 1) is not below the vocabulary size 96")

    def test_ids_dataset_records_its_format(self):
        data = make_ids_dataset(self.path("data"))
        with open(os.path.join(data, "dataset.json")) as f:
            self.assertEqual(json.load(f)["input_format"], "ids")


if __name__ == "__main__":
    sys.exit(cli_util.main("--models", "--tokenizers"))
