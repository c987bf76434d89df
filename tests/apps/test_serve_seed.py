#!/usr/bin/env python3
"""`trainyard serve`'s randomness (standard library only): a sampling
request without a seed draws its own (the API's promise: "If specified,
our system will make a best effort to sample deterministically"; without
one, every request is a fresh sample), so two such requests at temperature
1 give different tokens, on both endpoints and for the choices of n > 1;
two requests with the same seed give the same tokens (so the comparison can
tell). 48 tokens each: with at least two likely tokens per step a collision
has probability below 2^-48.

(`trainyard generate` has no unseeded sampling: --seed defaults to 0, so a
command repeats itself; its seeds are held by test_options_cli.py.)"""
import json
import sys
import unittest

import cli_util
import serve_util
from serve_util import Server

TOKENS = 48


class UnseededTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--ctx", "128")

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def tokens(self, path, full=True, **body):
        s = self.server
        request = {"model": s.name, "max_tokens": TOKENS, "temperature": 1.0,
                   "ignore_eos": True, "return_token_ids": True, **body}
        status, answer = s.post(path, request)
        self.assertEqual(status, 200, answer)
        ids = [c["token_ids"] for c in answer["choices"]]
        for i in ids:
            if full:
                self.assertEqual(len(i), TOKENS, answer)
        return ids

    def test_completions_without_seed_differ(self):
        a = self.tokens("/v1/completions", prompt="the cat")
        b = self.tokens("/v1/completions", prompt="the cat")
        self.assertNotEqual(a, b, "two unseeded requests sampled the same tokens")
        self.assertGreater(len(set(a[0])), 1)

    def test_chat_without_seed_differs(self):
        # A chat answer may end early (the template's <|im_end|> is a stop
        # token ignore_eos keeps): three answers, never all the same.
        messages = [{"role": "user", "content": "the cat"}]
        answers = [self.tokens("/v1/chat/completions", full=False, messages=messages)
                   for _ in range(3)]
        self.assertGreater(len({json.dumps(a) for a in answers}), 1,
                           "three unseeded chat requests sampled the same tokens: %r"
                           % answers)

    def test_choices_without_seed_differ(self):
        a, b = self.tokens("/v1/completions", prompt="the cat", n=2)
        self.assertNotEqual(a, b)

    def test_same_seed_same_tokens(self):
        a = self.tokens("/v1/completions", prompt="the cat", seed=5)
        b = self.tokens("/v1/completions", prompt="the cat", seed=5)
        self.assertEqual(a, b)


def main():
    try:
        return cli_util.main()
    finally:
        serve_util.remove_model()


if __name__ == "__main__":
    sys.exit(main())
