#!/usr/bin/env python3
"""Every input validated (issue 12, "silent acceptance of bad input" and
"unclear errors"): end-to-end tests of `trainyard` on inputs that used to be
accepted silently or refused with an error in the wrong terms. Python
standard library only.

usage: test_inputs_cli.py --trainyard EXE --models DIR [unittest args]
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
"""
import hashlib
import json
import os
import random
import shutil
import sys

import cli_util  # noqa: E402  (beside this file)
from cli_util import WORDS, make_corpus, make_ids_dataset, run, write  # noqa: E402,F401








class Base(cli_util.TempDirTest):
    def expect(self, args, rc, *needles, stdin=None):
        r = run(args, stdin)
        self.assertEqual(r.returncode, rc, "trainyard %s\nstdout: %s\nstderr: %s" % (
            " ".join(args), r.stdout[-2000:], r.stderr[-3000:]))
        for needle in needles:
            self.assertIn(needle, r.stderr)
        return r

    def copy_dataset(self, src, name):
        dst = self.path(name)
        shutil.copytree(src, dst)
        return dst


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
                   "summary.txt: a folder of that name is in the way")
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




if __name__ == "__main__":
    sys.exit(cli_util.main("--models"))
