#!/usr/bin/env python3
"""End-to-end tests of `trainyard data` (standard library only).

usage: test_data_cli.py --trainyard EXE [unittest args]

The shards are read back here by an independent reader (struct, zlib.crc32,
hashlib) and compared with the token stream built from `trainyard tokenize`
of every document. `HuggingFaceTest` compares a trained tokenizer with the
`tokenizers` package; run alone it exits 77 (skipped) when that package is
missing.
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

# 0, 1 or 77 (skipped) for ctest (tests/common/unittest_exit.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import unittest_exit  # noqa: E402

CFG = None
WORDS = ("the a of and to in is was he she it that for on with as his her at by "
         "from they we you this be had not but what all were when there can said "
         "time people water words long little very after sound great where help "
         "through line right too mean old any same tell boy follow came want show "
         "also around form three small set put end does another well large must "
         "big even such because turn here why ask went men read need land different "
         "home us move try kind hand picture again change off play spell air away "
         "animal house point page letter mother answer found study still learn "
         "caf\u00e9 na\u00efve \u65e5\u672c 42 3.14 don't it's").split()


def run(args, data=b"", check=None):
    r = subprocess.run([CFG.trainyard] + args, input=data, capture_output=True, timeout=120)
    if check is not None and r.returncode != check:
        raise AssertionError("trainyard %s: exit %d, expected %d\nstdout: %s\nstderr: %s" % (
            " ".join(args), r.returncode, check, r.stdout.decode(errors="replace"),
            r.stderr.decode(errors="replace")))
    return r


def sentence(rng, n=None):
    n = n or rng.randint(3, 14)
    s = " ".join(rng.choice(WORDS) for _ in range(n))
    return s[0].upper() + s[1:] + rng.choice([".", "!", "?", ",\n"])


def document(rng, sentences=None):
    return " ".join(sentence(rng) for _ in range(sentences or rng.randint(1, 8)))


def encode(tokenizer, text):
    r = run(["tokenize", "--tokenizer", tokenizer, "--no-special"], text.encode("utf-8"), 0)
    return [int(t) for t in r.stdout.split()]


def decode(tokenizer, ids):
    r = run(["tokenize", "--tokenizer", tokenizer, "--decode"],
            " ".join(map(str, ids)).encode(), 0)
    return r.stdout.decode("utf-8")


# ---- an independent reader of the format (docs/formats.md, "Token shards") ----

HEADER = struct.Struct("<8sIIIIIIQII8sII")
assert HEADER.size == 64


def read_split(folder, split):
    """Returns (meta, rows): rows are (tokens, weights); checks every CRC,
    hash and header field against dataset.json."""
    with open(os.path.join(folder, "dataset.json"), encoding="utf-8") as f:
        meta = json.load(f)
    t = meta["seq_len"]
    has_weights = meta["loss_weights"]
    body = 4 * (t + 1) + (t if has_weights else 0)
    stride = (body + 3) // 4 * 4 + 4
    assert meta["shard"]["row_stride"] == stride
    info = meta["splits"][split]
    rows = []
    for index, shard in enumerate(info["shards"]):
        with open(os.path.join(folder, shard["file"]), "rb") as f:
            data = f.read()
        assert hashlib.sha256(data).hexdigest() == shard["sha256"], shard["file"]
        assert len(data) == shard["bytes"] == 64 + shard["rows"] * stride
        (magic, version, header_size, seq_len, vocab, eos, flags, count, padding, shard_index,
         prefix, split_code, crc) = HEADER.unpack(data[:64])
        assert magic == b"TYDSHARD" and version == 1 and header_size == 64
        assert zlib.crc32(data[:60]) == crc
        assert (seq_len, vocab, eos) == (t, meta["tokenizer"]["vocab_size"],
                                         meta["tokenizer"]["eos_id"])
        assert flags == (1 if has_weights else 0) and count == shard["rows"]
        assert shard_index == index and split_code == ("train", "val").index(split)
        assert prefix.hex() == meta["tokenizer"]["sha256"][:16]
        last = index == len(info["shards"]) - 1
        assert padding == (info["padding"] if last else 0)
        for r in range(count):
            row = data[64 + r * stride:64 + (r + 1) * stride]
            assert zlib.crc32(row[:-4]) == struct.unpack("<I", row[-4:])[0]
            tokens = list(struct.unpack("<%dI" % (t + 1), row[:4 * (t + 1)]))
            if has_weights:
                weights = list(row[4 * (t + 1):4 * (t + 1) + t])
            else:
                weights = [1] * t
                if last and r == count - 1 and padding:
                    weights[t - padding:] = [0] * padding
            rows.append((tokens, weights))
    assert len(rows) == info["rows"]
    return meta, rows


def stream_of(rows, padding):
    """The stream the rows were cut from (overlap by one, padding dropped),
    and the weight of each stream token as a target (None for the first)."""
    if not rows:
        return [], []
    tokens, weights = list(rows[0][0]), [None] + list(rows[0][1])
    for prev, (row, w) in zip(rows, rows[1:]):
        assert row[0] == prev[0][-1], "consecutive rows overlap by one token"
        tokens += row[1:]
        weights += w
    if padding:
        assert all(w == 0 for w in weights[-padding:])
        tokens, weights = tokens[:-padding], weights[:-padding]
    return tokens, weights


class Fixture:
    """A temporary folder with a tokenizer trained on generated text."""
    tmp = None
    tokenizer = None
    chat_tokenizer = None

    @classmethod
    def setup(cls):
        if cls.tmp:
            return
        cls.tmp = tempfile.mkdtemp(prefix="ty_data_cli.")
        rng = random.Random(1)
        corpus = os.path.join(cls.tmp, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write("\n".join(document(rng) for _ in range(400)))
        cls.tokenizer = os.path.join(cls.tmp, "tok.json")
        run(["data", "train-tokenizer", "--input", corpus, "--vocab-size", "600",
             "--out", cls.tokenizer], check=0)
        cls.chat_tokenizer = os.path.join(cls.tmp, "chat_tok.json")
        run(["data", "train-tokenizer", corpus, "--vocab-size", "600", "--special",
             "<|im_start|>", "--special", "<|im_end|>", "--out", cls.chat_tokenizer], check=0)

    @classmethod
    def path(cls, *parts):
        return os.path.join(cls.tmp, *parts)


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


class TrainTokenizerTest(unittest.TestCase):
    def setUp(self):
        Fixture.setup()

    def test_file_loads_and_round_trips(self):
        with open(Fixture.tokenizer, encoding="utf-8") as f:
            tok = json.load(f)
        self.assertEqual(tok["model"]["type"], "BPE")
        self.assertEqual(len(tok["model"]["vocab"]), 600)
        self.assertEqual(tok["added_tokens"][0]["content"], "<|endoftext|>")
        self.assertEqual(tok["added_tokens"][0]["id"], 599)
        rng = random.Random(2)
        for text in [document(rng), "Unseen: zebra quartz \u00f1and\u00fa \U0001F389\n\n\t x",
                     "<|endoftext|>", ""]:
            ids = encode(Fixture.tokenizer, text)
            self.assertEqual(decode(Fixture.tokenizer, ids), text)

    def test_summary_and_determinism(self):
        corpus = Fixture.path("corpus.txt")
        out = Fixture.path("again.json")
        r = run(["data", "train-tokenizer", "--input", corpus, "--vocab-size", "600",
                 "--out", out], check=0)
        self.assertIn(b"600 = 256 bytes + 343 merges + 1 special", r.stdout)
        with open(out, "rb") as a, open(Fixture.tokenizer, "rb") as b:
            self.assertEqual(a.read(), b.read())
        r = run(["data", "train-tokenizer", "--input", corpus, "--vocab-size", "600",
                 "--out", out], check=1)
        self.assertIn(b"exists; pass --force", r.stderr)
        run(["data", "train-tokenizer", "--input", corpus, "--vocab-size", "600",
             "--out", out, "--force"], check=0)

    def test_usage_errors(self):
        corpus = Fixture.path("corpus.txt")
        out = Fixture.path("never.json")
        for args, message in [
            (["--vocab-size", "600", "--out", out], b"give at least one --input"),
            (["--input", corpus, "--out", out], b"--vocab-size N is required"),
            (["--input", corpus, "--vocab-size", "100", "--out", out], b"below 256"),
            (["--input", corpus, "--vocab-size", "x", "--out", out], b"positive integer"),
            (["--input", corpus, "--vocab-size", "600"], b"--out FILE is required"),
        ]:
            r = run(["data", "train-tokenizer"] + args, check=2)
            self.assertIn(message, r.stderr)
        r = run(["data", "train-tokenizer", "--input", Fixture.path("missing.txt"),
                 "--vocab-size", "600", "--out", out], check=1)
        self.assertIn(b"missing.txt", r.stderr)
        self.assertFalse(os.path.exists(out))


class PrepareTest(unittest.TestCase):
    def setUp(self):
        Fixture.setup()

    def prepare(self, out, inputs, *args, check=0, tokenizer=None):
        return run(["data", "prepare", "--tokenizer", tokenizer or Fixture.tokenizer,
                    "--out", out] + list(args) + ["--input"] + inputs, check=check)

    def test_text_round_trip_and_shards(self):
        rng = random.Random(3)
        docs = [document(rng, rng.randint(1, 30)) for _ in range(12)]
        files = [write(Fixture.path("doc%02d.txt" % i), d) for i, d in enumerate(docs)]
        out = Fixture.path("ds_text")
        r = self.prepare(out, files, "--seq-len", "16", "--shard-rows", "10")
        self.assertIn(b"train 12 documents", r.stdout)
        meta, rows = read_split(out, "train")
        self.assertGreater(len(meta["splits"]["train"]["shards"]), 1)
        self.assertEqual(meta["input_format"], "text")
        self.assertEqual(meta["created_by"].split()[0], "trainyard")
        with open(Fixture.tokenizer, "rb") as f:
            self.assertEqual(meta["tokenizer"]["sha256"], hashlib.sha256(f.read()).hexdigest())
        eos = meta["tokenizer"]["eos_id"]
        expected = [eos]
        for d in docs:
            expected += encode(Fixture.tokenizer, d) + [eos]
        tokens, weights = stream_of(rows, meta["splits"]["train"]["padding"])
        self.assertEqual(tokens, expected)
        self.assertTrue(all(w == 1 for w in weights[1:]))
        self.assertEqual(meta["splits"]["train"]["tokens"], len(expected))
        self.assertEqual(len(rows), (len(expected) - 1 + 15) // 16)
        self.assertEqual(meta["splits"]["val"]["rows"], 0)
        r = run(["data", "info", out, "--verify"], check=0)
        self.assertIn(b"every byte verified", r.stdout)

    def test_long_rows_of_many_documents(self):
        # Context parallel's data (issue 31): --seq-len 131072 over a corpus
        # of tiny documents joined by EOS. Each row holds thousands of
        # documents; the stream read back is every document in order, the
        # last row padded with untrained EOS.
        rng = random.Random(9)
        docs = [[rng.randrange(1, 96) for _ in range(rng.randint(1, 30))] for _ in range(20000)]
        src = write(Fixture.path("long.jsonl"), "".join(json.dumps(d) + "\n" for d in docs))
        out = Fixture.path("ds_long")
        run(["data", "prepare", "--format", "ids", "--vocab-size", "96", "--eos-id", "0",
             "--seq-len", "131072", "--out", out, "--input", src], check=0)
        meta, rows = read_split(out, "train")
        self.assertEqual(meta["seq_len"], 131072)
        expected = [0]
        for d in docs:
            expected += d + [0]
        info = meta["splits"]["train"]
        self.assertEqual((info["documents"], info["tokens"]), (len(docs), len(expected)))
        self.assertEqual(len(rows), (len(expected) - 1 + 131071) // 131072)
        self.assertGreater(len(rows), 1)
        self.assertTrue(all(len(r[0]) == 131073 for r in rows))
        tokens, weights = stream_of(rows, info["padding"])
        self.assertEqual(tokens, expected)
        self.assertTrue(all(w == 1 for w in weights[1:]))
        r = run(["data", "info", out, "--verify"], check=0)
        self.assertIn(b"every byte verified", r.stdout)

    def test_lines_and_val_split(self):
        rng = random.Random(4)
        lines = [sentence(rng).strip() for _ in range(300)]
        src = write(Fixture.path("lines.txt"), "\n".join(lines[:150]) + "\n\n  \n" +
                    "\n".join(lines[150:]) + "\n")
        a, b, c = (Fixture.path(n) for n in ("ds_val_a", "ds_val_b", "ds_val_c"))
        for out, seed in ((a, "5"), (b, "5"), (c, "6")):
            self.prepare(out, [src], "--format", "lines", "--seq-len", "32",
                         "--val-fraction", "0.3", "--seed", seed)
        for name in sorted(os.listdir(a)):
            with open(os.path.join(a, name), "rb") as f1, open(os.path.join(b, name), "rb") as f2:
                self.assertEqual(f1.read(), f2.read(), name)  # same seed, same bytes
        splits = {}
        for out in (a, c):
            docs = {}
            for split in ("train", "val"):
                meta, rows = read_split(out, split)
                tokens, _ = stream_of(rows, meta["splits"][split]["padding"])
                eos = meta["tokenizer"]["eos_id"]
                text = decode(Fixture.tokenizer, tokens)
                pieces = text.split("<|endoftext|>")
                self.assertEqual(pieces[0], "")
                self.assertEqual(pieces[-1], "")
                docs[split] = pieces[1:-1]
                self.assertEqual(len(docs[split]), meta["splits"][split]["documents"])
                self.assertEqual(tokens.count(eos), len(docs[split]) + 1)
            # whole lines, each in exactly one split, about 30% in val
            self.assertEqual(sorted(docs["train"] + docs["val"]), sorted(lines))
            self.assertTrue(40 < len(docs["val"]) < 140, len(docs["val"]))
            splits[out] = set(docs["val"])
        self.assertNotEqual(splits[a], splits[c])  # another seed, another split

    def test_jsonl(self):
        rng = random.Random(5)
        docs = [document(rng) for _ in range(20)]
        src = write(Fixture.path("data.jsonl"), "\n".join(
            json.dumps({"id": i, "body": d}) for i, d in enumerate(docs)) + "\n")
        out = Fixture.path("ds_jsonl")
        self.prepare(out, [src], "--format", "jsonl", "--text-field", "body", "--seq-len", "8")
        meta, rows = read_split(out, "train")
        eos = meta["tokenizer"]["eos_id"]
        expected = [eos]
        for d in docs:
            expected += encode(Fixture.tokenizer, d) + [eos]
        self.assertEqual(stream_of(rows, meta["splits"]["train"]["padding"])[0], expected)
        self.assertEqual(meta["prepare"]["text_field"], "body")

    def test_chat_weights(self):
        rng = random.Random(6)
        convs = []
        for _ in range(25):
            messages = []
            if rng.random() < 0.5:
                messages.append({"role": "system", "content": sentence(rng)})
            for _ in range(rng.randint(1, 3)):
                messages.append({"role": "user", "content": sentence(rng)})
                messages.append({"role": "assistant", "content": document(rng, 2)})
            convs.append(messages)
        src = write(Fixture.path("chat.jsonl"),
                    "".join(json.dumps({"messages": m}) + "\n" for m in convs))
        out = Fixture.path("ds_chat")
        self.prepare(out, [src], "--format", "chat", "--chat-template", "chatml",
                     "--seq-len", "24", tokenizer=Fixture.chat_tokenizer)
        meta, rows = read_split(out, "train")
        self.assertTrue(meta["loss_weights"])
        self.assertEqual(meta["chat_template"], "chatml")
        tokens, weights = stream_of(rows, meta["splits"]["train"]["padding"])
        trained = [t for t, w in zip(tokens[1:], weights[1:]) if w == 1]
        ignored = [t for t, w in zip(tokens[1:], weights[1:]) if w == 0]
        assistant = "".join(m["content"] + "<|im_end|>" for c in convs for m in c
                            if m["role"] == "assistant")
        self.assertEqual(decode(Fixture.chat_tokenizer, trained), assistant)
        rest = "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"])
                       if m["role"] != "assistant" else "<|im_start|>assistant\n\n"
                       for c in convs for m in c) + "<|endoftext|>" * len(convs)
        self.assertEqual(sorted(decode(Fixture.chat_tokenizer, ignored)), sorted(rest))
        # a tokenizer without the markers is refused, naming the fix
        r = self.prepare(Fixture.path("ds_chat2"), [src], "--format", "chat", "--seq-len", "8",
                         check=1)
        self.assertIn(b"has no token <|im_start|>", r.stderr)
        self.assertFalse(os.path.exists(Fixture.path("ds_chat2")))

    def test_fortune(self):
        src = write(Fixture.path("fortunes"),
                    "A penny saved is a penny earned.\n%\n_\bH_\bi there,\n  said he.\n%\n"
                    "%\n   \n%\nLast one, no final separator.\n")
        out = Fixture.path("ds_fortune")
        r = self.prepare(out, [src], "--format", "fortune", "--seq-len", "4")
        self.assertIn(b"train 3 documents", r.stdout)
        meta, rows = read_split(out, "train")
        tokens, _ = stream_of(rows, meta["splits"]["train"]["padding"])
        self.assertEqual(decode(Fixture.tokenizer, tokens),
                         "<|endoftext|>A penny saved is a penny earned.<|endoftext|>"
                         "Hi there,\n  said he.<|endoftext|>"
                         "Last one, no final separator.<|endoftext|>")

    def test_runtime_errors_leave_nothing(self):
        out = Fixture.path("ds_bad")
        bad_json = write(Fixture.path("bad.jsonl"), '{"text": "ok"}\n{"text": oops}\n')
        no_field = write(Fixture.path("nofield.jsonl"), '{"text": "ok"}\n\n{"body": "x"}\n')
        blank = write(Fixture.path("blank.txt"), "  \n\n")
        cases = [
            ([Fixture.path("nothere.txt")], ["--seq-len", "8"],
             b"cannot read input " + Fixture.path("nothere.txt").encode()),
            ([bad_json], ["--seq-len", "8", "--format", "jsonl"], b"bad.jsonl:2: not valid JSON"),
            ([no_field], ["--seq-len", "8", "--format", "jsonl"],
             b'nofield.jsonl:3: no string field "text"'),
            ([blank], ["--seq-len", "8"], b"no training rows"),
        ]
        for inputs, args, message in cases:
            r = self.prepare(out, inputs, *args, check=1)
            self.assertIn(message, r.stderr)
            self.assertFalse(os.path.exists(out))
            self.assertEqual([n for n in os.listdir(Fixture.tmp) if n.startswith("ds_bad")], [])

    def test_existing_folder(self):
        src = write(Fixture.path("one.txt"), "One small document.")
        out = Fixture.path("ds_exists")
        self.prepare(out, [src], "--seq-len", "4")
        r = self.prepare(out, [src], "--seq-len", "4", check=1)
        self.assertIn(b"already holds a dataset; pass --force", r.stderr)
        self.prepare(out, [src], "--seq-len", "8", "--force")
        self.assertEqual(read_split(out, "train")[0]["seq_len"], 8)
        other = Fixture.path("ds_other")
        os.mkdir(other)
        write(os.path.join(other, "keep.txt"), "mine")
        r = self.prepare(other, [src], "--seq-len", "4", "--force", check=1)
        self.assertIn(b"is never replaced", r.stderr)
        self.assertEqual(os.listdir(other), ["keep.txt"])

    def test_usage_errors(self):
        src = Fixture.path("corpus.txt")
        out = Fixture.path("ds_usage")
        for args, message in [
            (["--seq-len", "0"], b"--seq-len must be an integer from 1"),
            (["--seq-len", "8", "--val-fraction", "1"], b"--val-fraction must be a number in [0, 1)"),
            (["--seq-len", "8", "--val-fraction", "-0.1"], b"[0, 1)"),
            (["--seq-len", "8", "--format", "xml"], b"--format must be"),
            (["--seq-len", "8", "--chat-template", "llama"], b"unknown"),
            (["--seq-len", "8", "--bogus"], b"unknown option '--bogus'"),
            ([], b"--seq-len N is required"),
        ]:
            r = self.prepare(out, [src], *args, check=2)
            self.assertIn(message, r.stderr)
        r = run(["data", "prepare", "--out", out, "--seq-len", "8", src], check=2)
        self.assertIn(b"--tokenizer FILE is required", r.stderr)
        self.assertFalse(os.path.exists(out))
        for sub in ("prepare", "train-tokenizer", "info"):
            r = run(["data", sub, "--help"], check=0)
            self.assertIn(b"usage: trainyard data " + sub.encode(), r.stdout)
        run(["data", "--help"], check=0)
        self.assertIn(b"not a data subcommand", run(["data", "frobnicate"], check=2).stderr)
        self.assertIn(b"data", run(["--help"], check=0).stdout)

    def test_info_finds_damage(self):
        src = write(Fixture.path("dmg.txt"), document(random.Random(7), 40))
        out = Fixture.path("ds_damage")
        self.prepare(out, [src], "--seq-len", "8")
        shard = os.path.join(out, "train-00000.tyds")
        with open(shard, "r+b") as f:
            f.seek(64 + 40 * 3 + 5)  # row 3 (stride 40 for T = 8)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x40]))
        run(["data", "info", out], check=0)  # headers and sizes are fine
        r = run(["data", "info", out, "--verify"], check=1)
        self.assertIn(b"train-00000.tyds: row 3 (row 3 of the train split) is damaged", r.stderr)
        with open(shard, "r+b") as f:
            f.truncate(64 + 40 * 2 + 10)
        r = run(["data", "info", out], check=1)
        self.assertIn(b"truncated", r.stderr)
        self.assertIn(b"row 2 (row 2 of the train split) is the first incomplete one", r.stderr)


class HuggingFaceTest(unittest.TestCase):
    """A trained tokenizer.json read by Hugging Face `tokenizers`."""

    def test_tokenizers_encodes_alike(self):
        try:
            import tokenizers  # noqa: F401
        except ImportError:
            self.skipTest("the Python package 'tokenizers' is not installed "
                          "(scripts/install-deps.sh installs it)")
        Fixture.setup()
        from tokenizers import Tokenizer
        for path in (Fixture.tokenizer, Fixture.chat_tokenizer):
            hf = Tokenizer.from_file(path)
            rng = random.Random(8)
            texts = [document(rng) for _ in range(20)] + [
                "Unseen: zebra quartz \u00f1and\u00fa \U0001F389\n\n\t x  ",
                "a<|endoftext|>b<|im_start|>user\nhi<|im_end|>\n", "", "   ", "'s 've 123 4567"]
            for text in texts:
                with self.subTest(tokenizer=os.path.basename(path), text=text[:30]):
                    self.assertEqual(encode(path, text), hf.encode(text).ids)
                    ids = hf.encode(text).ids
                    self.assertEqual(hf.decode(ids, skip_special_tokens=False), text)


def main():
    global CFG
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    CFG, rest = parser.parse_known_args()
    if rest == ["HuggingFaceTest"]:
        try:
            import tokenizers  # noqa: F401
        except ImportError:
            print("SKIP: the Python package 'tokenizers' is not installed "
                  "(scripts/install-deps.sh installs it)")
            return 77
    try:
        result = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2).result
    finally:
        if Fixture.tmp:
            shutil.rmtree(Fixture.tmp, ignore_errors=True)
    return unittest_exit.exit_code(result)


if __name__ == "__main__":
    sys.exit(main())
