#!/usr/bin/env python3
"""End-to-end tests of `trainyard tokenize` (standard library only).

usage: test_tokenize_cli.py --trainyard EXE --fixtures DIR [unittest args]

DIR is tests/fixtures/tokenizers: the tokenizer.json files and cases.json,
whose expected ids and text come from Hugging Face `tokenizers`. The command
reads stdin as bytes, so these tests feed bytes and compare bytes.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

# 0, 1 or 77 (skipped) for ctest (tests/common/unittest_exit.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import unittest_exit  # noqa: E402

CFG = None
CASES = None
SAMPLE = ["ascii", "trailing_newline", "newlines", "emoji", "chinese", "contractions",
          "special_gpt2", "special_llama2", "special_llama3", "empty", "long_text"]


def tokenizer(name):
    return os.path.join(CFG.fixtures, name, "tokenizer.json")


def run(args, data=b""):
    return subprocess.run([CFG.trainyard] + args, input=data, capture_output=True, timeout=60)


def case(name):
    for c in CASES["cases"]:
        if c["name"] == name:
            return c
    raise KeyError(name)


def expected(c, fixture, key):
    exp = c["expected"][fixture]
    fallback = {"ids_plain": "ids", "decoded_skip": "decoded", "decoded_plain": "decoded"}
    return exp.get(key, exp.get(fallback.get(key)))


class EncodeTest(unittest.TestCase):
    def encode(self, fixture, text, *extra):
        r = run(["tokenize", "--tokenizer", tokenizer(fixture)] + list(extra),
                text.encode("utf-8"))
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertEqual(r.stderr, b"")
        return r.stdout.decode("ascii")

    def test_ids_match_hugging_face(self):
        for fixture in ("gpt2", "llama3", "llama2_legacy", "llama2_metaspace"):
            for name in SAMPLE:
                c = case(name)
                with self.subTest(fixture=fixture, case=name):
                    out = self.encode(fixture, c["text"])
                    self.assertTrue(out.endswith("\n"))
                    self.assertEqual([int(t) for t in out.split()], expected(c, fixture, "ids"))
                    out = self.encode(fixture, c["text"], "--no-special")
                    self.assertEqual([int(t) for t in out.split()],
                                     expected(c, fixture, "ids_plain"))
                    out = self.encode(fixture, c["text"], "--json")
                    self.assertEqual(json.loads(out), {"ids": expected(c, fixture, "ids")})

    def test_trailing_newline_is_text(self):
        with_newline = [int(t) for t in self.encode("gpt2", "a line of text\n").split()]
        without = [int(t) for t in self.encode("gpt2", "a line of text").split()]
        self.assertEqual(with_newline, expected(case("trailing_newline"), "gpt2", "ids"))
        self.assertGreater(len(with_newline), len(without))
        self.assertEqual(with_newline[:len(without)], without)

    def test_empty_input(self):
        self.assertEqual(self.encode("gpt2", ""), "\n")
        self.assertEqual(json.loads(self.encode("llama3", "", "--json")),
                         {"ids": expected(case("empty"), "llama3", "ids")})


class DecodeTest(unittest.TestCase):
    def decode(self, fixture, data, *extra):
        r = run(["tokenize", "--tokenizer", tokenizer(fixture), "--decode"] + list(extra), data)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertEqual(r.stderr, b"")
        return r.stdout

    def test_round_trip_through_the_command(self):
        for fixture in ("gpt2", "llama3"):
            for name in SAMPLE:
                text = case(name)["text"].encode("utf-8")
                with self.subTest(fixture=fixture, case=name):
                    enc = run(["tokenize", "--tokenizer", tokenizer(fixture), "--no-special"],
                              text)
                    self.assertEqual(enc.returncode, 0, enc.stderr.decode())
                    self.assertEqual(self.decode(fixture, enc.stdout), text)

    def test_decode_matches_hugging_face(self):
        for fixture in ("llama2_legacy", "llama2_metaspace", "llama3"):
            for name in SAMPLE:
                c = case(name)
                ids = " ".join(str(i) for i in expected(c, fixture, "ids")).encode()
                with self.subTest(fixture=fixture, case=name):
                    self.assertEqual(self.decode(fixture, ids),
                                     expected(c, fixture, "decoded").encode("utf-8"))
                    self.assertEqual(self.decode(fixture, ids, "--no-special"),
                                     expected(c, fixture, "decoded_skip").encode("utf-8"))

    def test_id_formats(self):
        c = case("special_gpt2")
        ids = expected(c, "gpt2", "ids")
        text = c["text"].encode("utf-8")
        self.assertEqual(self.decode("gpt2", ",".join(map(str, ids)).encode()), text)
        self.assertEqual(self.decode("gpt2", ("\n".join(map(str, ids)) + "\n").encode()), text)
        self.assertEqual(self.decode("gpt2", json.dumps(ids).encode()), text)
        self.assertEqual(self.decode("gpt2", json.dumps({"ids": ids}).encode()), text)
        self.assertEqual(self.decode("gpt2", b""), b"")

    def test_json_output(self):
        c = case("emoji")
        ids = json.dumps(expected(c, "llama3", "ids_plain")).encode()
        self.assertEqual(json.loads(self.decode("llama3", ids, "--json")), {"text": c["text"]})
        # Part of a UTF-8 character (a rare one, three byte tokens in this tiny
        # vocabulary): raw bytes without --json, U+FFFD with it.
        first = run(["tokenize", "--tokenizer", tokenizer("gpt2"), "--no-special"],
                    "\u9f98".encode("utf-8"))
        ids = [int(t) for t in first.stdout.split()]
        self.assertEqual(len(ids), 3)
        self.assertEqual(self.decode("gpt2", str(ids[0]).encode()), "\u9f98".encode("utf-8")[:1])
        self.assertEqual(json.loads(self.decode("gpt2", str(ids[0]).encode(), "--json")),
                         {"text": "\ufffd"})


class ErrorTest(unittest.TestCase):
    def assert_fails(self, args, data, code, *needles):
        r = run(["tokenize"] + args, data)
        err = r.stderr.decode()
        self.assertEqual(r.returncode, code, "stdout: %r\nstderr: %s" % (r.stdout, err))
        self.assertEqual(r.stdout, b"")
        for n in needles:
            self.assertIn(n, err)

    def test_runtime_errors(self):
        with tempfile.TemporaryDirectory() as tmp:
            bad_json = os.path.join(tmp, "bad.json")
            with open(bad_json, "w") as f:
                f.write('{"model": {"type": "BPE", ')
            wordpiece = os.path.join(tmp, "wordpiece.json")
            with open(wordpiece, "w") as f:
                json.dump({"model": {"type": "WordPiece", "vocab": {"a": 0}}}, f)
            missing = os.path.join(tmp, "missing.json")
            self.assert_fails(["--tokenizer", missing], b"hi", 1, "NOT_FOUND", missing)
            self.assert_fails(["--tokenizer", bad_json], b"hi", 1, "DATA_LOSS", "not valid JSON")
            self.assert_fails(["--tokenizer", wordpiece], b"hi", 1, "UNIMPLEMENTED",
                              "'WordPiece' is not supported")
        gpt2 = ["--tokenizer", tokenizer("gpt2")]
        self.assert_fails(gpt2 + ["--decode"], b"1 2 1000000", 1, "INVALID_ARGUMENT",
                          "id 1000000 (at position 2) is not in the vocabulary")
        self.assert_fails(gpt2 + ["--decode"], b"1 two", 1, "'two'", "not a token id")
        self.assert_fails(gpt2 + ["--decode"], b"[1, -2]", 1, "ids[1]")
        self.assert_fails(gpt2 + ["--decode"], b"[1, 2", 1, "not valid JSON")
        self.assert_fails(gpt2, b"ok \xff\xfe", 1, "not valid UTF-8", "offset 3")

    def test_usage_errors(self):
        self.assert_fails([], b"", 2, "--tokenizer FILE is required", "trainyard tokenize --help")
        self.assert_fails(["--tokenizer"], b"", 2, "--tokenizer needs")
        self.assert_fails(["--tokenizer", tokenizer("gpt2"), "--frobnicate"], b"", 2,
                          "unknown option '--frobnicate'")
        self.assert_fails(["--tokenizer", tokenizer("gpt2"), "text"], b"", 2,
                          "unexpected argument 'text'")

    def test_help(self):
        for args in (["tokenize", "--help"], ["help", "tokenize"]):
            r = run(args)
            self.assertEqual(r.returncode, 0)
            self.assertIn(b"usage: trainyard tokenize --tokenizer FILE", r.stdout)
        r = run(["--help"])
        self.assertIn(b"tokenize", r.stdout)


def main():
    global CFG, CASES
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--fixtures", required=True)
    CFG, rest = parser.parse_known_args()
    with open(os.path.join(CFG.fixtures, "cases.json"), encoding="utf-8") as f:
        CASES = json.load(f)
    sys.exit(unittest_exit.run([sys.argv[0]] + rest))


if __name__ == "__main__":
    main()
