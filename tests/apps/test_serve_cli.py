"""`trainyard serve` end to end (issue 15), driven by the official `openai`
Python package and by curl, on a small model trained here, on cpu, at a
free loopback port: completions and chat, streaming, stop strings, n > 1,
seeds, greedy output against `trainyard generate --greedy` token for token
(also while other requests share the batch), logprobs against `trainyard
forward` within 1e-5, every error shape with its HTTP status, clients that
disconnect, and SIGTERM during streams. Exit 77 (skipped, with the reason)
without the openai package or curl."""
import json
import math
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest

import cli_util
import serve_util
from cli_util import run
from serve_util import Server, raw_request, seconds_until_closed, sse_events, wait_for

try:
    import openai
except ImportError:  # pragma: no cover
    openai = None


def load_logits(path):
    """logits F32 [B, T, V] of a `trainyard forward` output (safetensors)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    info = header["logits"]
    begin, end = info["data_offsets"]
    raw = data[8 + n + begin:8 + n + end]
    values = struct.unpack(f"<{len(raw) // 4}f", raw)
    _, t, v = info["shape"]
    return [values[i * v:(i + 1) * v] for i in range(t)]


def log_softmax(row, index):
    top = max(row)
    return row[index] - top - math.log(sum(math.exp(x - top) for x in row))


class ApiTest(unittest.TestCase):
    """One server for the API's behaviour (small prefill chunks, so prompts
    run in several padded chunks)."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server("--max-batch", "4", "--ctx", "256", "--prefill-chunk", "8")
        cls.client = cls.server.client()
        cls.model = cls.server.name

    @classmethod
    def tearDownClass(cls):
        cls.assert_rc = cls.server.stop()
        cls.server.close()
        assert cls.assert_rc == 0, cls.server.stderr()

    def complete(self, **kw):
        kw.setdefault("model", self.model)
        return self.client.completions.create(**kw)

    def test_models_and_health(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], [self.model])
        self.assertEqual(self.client.models.retrieve(self.model).id, self.model)
        with self.assertRaises(openai.NotFoundError):
            self.client.models.retrieve("no-such-model")
        status, _, body = self.server.request("GET", "/health")
        self.assertEqual((status, json.loads(body)), (200, {"status": "ok"}))

    def test_completion(self):
        r = self.complete(prompt="the cat sat", max_tokens=12, temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertTrue(r.id.startswith("cmpl-"))
        self.assertEqual(len(r.choices), 1)
        self.assertIn(r.choices[0].finish_reason, ("length", "stop"))
        self.assertIsInstance(r.choices[0].text, str)
        self.assertGreater(r.usage.prompt_tokens, 0)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)
        # A prompt of token ids; several prompts at once.
        ids = self.complete(prompt=[5, 6, 7], max_tokens=4, temperature=0)
        self.assertEqual(ids.usage.prompt_tokens, 3)
        many = self.complete(prompt=["the dog", "a bird"], max_tokens=3, temperature=0)
        self.assertEqual([c.index for c in many.choices], [0, 1])
        self.assertEqual(many.choices[0].text,
                         self.complete(prompt="the dog", max_tokens=3, temperature=0)
                         .choices[0].text)

    def test_stream_chunk_bytes(self):
        """Token chunks without log-probabilities are written around a cached
        head instead of built as JSON values: the bytes are those of the JSON
        path (TRAINYARD_SERVE_JSON_CHUNKS=1), ids and times aside."""
        os.environ["TRAINYARD_SERVE_JSON_CHUNKS"] = "1"
        try:
            other = Server("--max-batch", "4", "--ctx", "256", "--prefill-chunk", "8")
        finally:
            del os.environ["TRAINYARD_SERVE_JSON_CHUNKS"]
        mask = lambda b: re.sub(rb'"created":\d+', b'"created":0', re.sub(  # noqa: E731
            rb'"id":"[^"]*"', b'"id":""', b))
        bodies = [
            ("/v1/completions", {"prompt": "the cat sat", "max_tokens": 24, "temperature": 0}),
            ("/v1/completions", {"prompt": ["\"quoted\"\n", "tab\there \u00e9\u4e16"],
                                 "max_tokens": 16, "temperature": 0, "return_token_ids": True}),
            ("/v1/completions", {"prompt": "a b c", "max_tokens": 12, "temperature": 0.9,
                                 "seed": 5, "n": 2, "stop": ["e"],
                                 "stream_options": {"include_usage": True}}),
            ("/v1/completions", {"prompt": "x", "max_tokens": 6, "temperature": 0,
                                 "logprobs": 2}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi \\ there"}],
                                      "max_tokens": 20, "temperature": 0}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello"}],
                                      "max_tokens": 10, "temperature": 0,
                                      "return_token_ids": True, "n": 2}),
        ]
        try:
            for path, body in bodies:
                body = dict(body, model=self.model, stream=True)
                got = [srv.request("POST", path, body) for srv in (self.server, other)]
                for status, _, data in got:
                    self.assertEqual(status, 200, data[:300])
                fast, slow = (mask(data) for _, _, data in got)
                self.assertEqual(fast, slow, body)
                chunks = [line for line in fast.split(b"\n\n") if line.startswith(b"data: {")]
                self.assertGreater(len(chunks), 2, fast[:300])
                for line in chunks:
                    json.loads(line[6:])
        finally:
            self.assertEqual(other.stop(), 0)
            other.close()

    def test_chat(self):
        r = self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": "hello there"}],
            max_tokens=10, temperature=0)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIsInstance(r.choices[0].message.content, str)
        # The prompt is Qwen2's template rendered: default system message,
        # user turn, assistant header.
        text = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n")
        tokens = run(["tokenize", "--tokenizer", os.path.join(self.server.model, "tokenizer.json")],
                     stdin=text).stdout.split()
        self.assertEqual(r.usage.prompt_tokens, len(tokens))
        # Content as a list of text parts is the same conversation.
        parts = self.client.chat.completions.create(
            model=self.model, max_tokens=10, temperature=0,
            messages=[{"role": "user", "content": [{"type": "text", "text": "hello "},
                                                   {"type": "text", "text": "there"}]}])
        self.assertEqual(parts.choices[0].message.content, r.choices[0].message.content)

    def test_streaming_equals_whole(self):
        for sampling in ({"temperature": 0}, {"temperature": 1.3, "seed": 11}):
            whole = self.complete(prompt="the park", max_tokens=24, **sampling)
            chunks = list(self.complete(prompt="the park", max_tokens=24, stream=True,
                                        **sampling))
            text = "".join(c.choices[0].text for c in chunks if c.choices)
            self.assertEqual(text, whole.choices[0].text)
            self.assertEqual(chunks[-1].choices[0].finish_reason, whole.choices[0].finish_reason)
            self.assertEqual(chunks[-1].usage.completion_tokens, whole.usage.completion_tokens)
            chat_args = dict(model=self.model, max_tokens=20,
                             messages=[{"role": "user", "content": "a dog"}], **sampling)
            whole = self.client.chat.completions.create(**chat_args)
            chunks = list(self.client.chat.completions.create(stream=True, **chat_args))
            self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            self.assertEqual(text, whole.choices[0].message.content)
            self.assertEqual(chunks[-1].usage.total_tokens, whole.usage.total_tokens)
        # OpenAI's separate usage chunk when asked for.
        chunks = list(self.complete(prompt="the", max_tokens=3, temperature=0, stream=True,
                                    stream_options={"include_usage": True}))
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 3)

    def test_stop_strings(self):
        long = self.complete(prompt="the cat", max_tokens=60, temperature=0).choices[0].text
        self.assertGreater(len(long), 12, long)
        stop = long[8:11]  # a piece from the middle
        cut = long[:long.index(stop)]
        for stream in (False, True):
            r = self.complete(prompt="the cat", max_tokens=60, temperature=0, stop=[stop, "zzzz"],
                              stream=stream)
            if stream:
                chunks = list(r)
                text = "".join(c.choices[0].text for c in chunks if c.choices)
                finish = chunks[-1].choices[0].finish_reason
            else:
                text, finish = r.choices[0].text, r.choices[0].finish_reason
            self.assertEqual(text, cut)
            self.assertEqual(finish, "stop")

    def test_n_and_seeds(self):
        args = dict(prompt="the", max_tokens=16, temperature=1.5, n=3, seed=42,
                    extra_body={"return_token_ids": True})
        a, b = self.complete(**args), self.complete(**args)
        self.assertEqual([c.index for c in a.choices], [0, 1, 2])
        ids = [c.model_extra["token_ids"] for c in a.choices]
        self.assertEqual(ids, [c.model_extra["token_ids"] for c in b.choices])  # repeatable
        self.assertEqual(len({tuple(x) for x in ids}), 3)  # the choices differ
        other = self.complete(**dict(args, seed=43))
        self.assertNotEqual(ids, [c.model_extra["token_ids"] for c in other.choices])
        # Streaming gives each choice the same draws.
        streamed = {}
        for chunk in self.complete(stream=True, **args):
            for c in chunk.choices:
                streamed.setdefault(c.index, []).extend(c.model_extra.get("token_ids") or [])
        self.assertEqual([streamed[i] for i in range(3)], ids)

    def test_penalties(self):
        # Greedy text from a tiny model repeats tokens; a frequency or
        # repetition penalty over the generated tokens changes that, and the
        # zero / one defaults change nothing.
        args = dict(prompt=[5, 6, 7], max_tokens=24, temperature=0,
                    extra_body={"return_token_ids": True})
        base = self.complete(**args).choices[0].model_extra["token_ids"]
        self.assertLess(len(set(base)), len(base), base)  # it repeats, so penalties can act
        neutral = self.complete(**dict(args, presence_penalty=0, frequency_penalty=0,
                                       extra_body={"return_token_ids": True,
                                                   "repetition_penalty": 1, "min_p": 0}))
        self.assertEqual(neutral.choices[0].model_extra["token_ids"], base)
        freq = self.complete(**dict(args, frequency_penalty=2))
        self.assertNotEqual(freq.choices[0].model_extra["token_ids"], base)
        rep = self.complete(**dict(args, extra_body={"return_token_ids": True,
                                                     "repetition_penalty": 50}))
        got = rep.choices[0].model_extra["token_ids"]
        self.assertNotEqual(got, base)
        self.assertGreater(len(set(got)), len(set(base)))
        # min_p near 1 keeps the top token only: sampling becomes greedy.
        sampled = self.complete(**dict(args, temperature=1.0, seed=3,
                                       extra_body={"return_token_ids": True, "min_p": 0.999999}))
        self.assertEqual(sampled.choices[0].model_extra["token_ids"], base)

    def test_greedy_equals_generate(self):
        prompts = [[1, 2, 3], [40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140], [7]]
        # Others share the batch meanwhile.
        noise = [threading.Thread(target=self.complete,
                                  kwargs=dict(prompt="the cat and the dog", max_tokens=40,
                                              temperature=1.0, seed=i)) for i in range(3)]
        for t in noise:
            t.start()
        for prompt in prompts:
            r = self.complete(prompt=prompt, max_tokens=20, temperature=0,
                              extra_body={"return_token_ids": True})
            got = r.choices[0].model_extra["token_ids"]
            g = run(["generate", "--model", self.server.model, "--prompt-ids",
                     ",".join(map(str, prompt)), "--max-new-tokens", "20", "--greedy",
                     "--stop-at-eos", "--json"])
            self.assertEqual(g.returncode, 0, g.stderr)
            self.assertEqual(got, json.loads(g.stdout)["ids"])
        for t in noise:
            t.join()

    def test_logprobs_equal_forward(self):
        prompt = [3, 14, 15, 92, 65]
        r = self.complete(prompt=prompt, max_tokens=10, temperature=0, logprobs=3,
                          extra_body={"return_token_ids": True})
        ids = r.choices[0].model_extra["token_ids"]
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.token_logprobs), len(ids))
        self.assertEqual(len(lp.top_logprobs), len(ids))
        self.assertTrue(all(len(t) <= 3 for t in lp.top_logprobs))
        tokens = os.path.join(self.tmp, "tokens.json")
        with open(tokens, "w") as f:
            json.dump([prompt + ids], f)
        out = os.path.join(self.tmp, "out.safetensors")
        f = run(["forward", "--model", self.server.model, "--tokens", tokens, "--out", out])
        self.assertEqual(f.returncode, 0, f.stderr)
        logits = load_logits(out)
        for i, (token, got) in enumerate(zip(ids, lp.token_logprobs)):
            want = log_softmax(logits[len(prompt) - 1 + i], token)
            self.assertLess(abs(got - want), 1e-5, f"token {i}: {got} vs forward {want}")
            # Greedy: the chosen token is the most likely one.
            self.assertAlmostEqual(max(lp.top_logprobs[i].values()), got, delta=1e-9)
        # Chat logprobs: the chosen token and alternatives with bytes.
        c = self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
            temperature=0, logprobs=True, top_logprobs=2)
        content = c.choices[0].logprobs.content
        self.assertEqual(len(content), c.usage.completion_tokens)
        self.assertEqual(len(content[0].top_logprobs), 2)
        self.assertIsInstance(content[0].bytes, list)

    def setUp(self):
        self.tmp = cli_util.tempfile.mkdtemp(prefix="ty_serve_test_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def expect_error(self, status, body, param, fragment, path="/v1/completions", code=None):
        got, data = self.server.post(path, body, raw=isinstance(body, bytes))
        self.assertEqual(got, status, data)
        error = data["error"]
        self.assertEqual(set(error), {"message", "type", "param", "code"})
        self.assertEqual(error["param"], param, error)
        self.assertIn(fragment, error["message"])
        if code:
            self.assertEqual(error["code"], code)
        return error

    def test_errors(self):
        m = self.model
        self.expect_error(400, b'{"model": "x", ', None, "not valid JSON")
        self.expect_error(400, b'[1, 2]', None, "must be a JSON object")
        self.expect_error(400, {"prompt": "hi"}, "model", "'model' is required")
        self.expect_error(400, {"model": m}, "prompt", "'prompt' is required")
        self.expect_error(400, {"model": m, "prompt": "hi", "max_tokens": "5"}, "max_tokens",
                          "must be an integer")
        self.expect_error(400, {"model": m, "prompt": "hi", "temperature": 3}, "temperature",
                          "must be in [0, 2]")
        self.expect_error(400, {"model": m, "prompt": "hi", "top_p": 0}, "top_p", "(0, 1]")
        self.expect_error(400, {"model": m, "prompt": "hi", "presence_penalty": 2.5},
                          "presence_penalty", "must be in [-2, 2]")
        self.expect_error(400, {"model": m, "prompt": "hi", "frequency_penalty": -3},
                          "frequency_penalty", "must be in [-2, 2]")
        self.expect_error(400, {"model": m, "prompt": "hi", "repetition_penalty": 0},
                          "repetition_penalty", "must be in (0,")
        self.expect_error(400, {"model": m, "prompt": "hi", "min_p": 1}, "min_p",
                          "must be in [0, 1)")
        self.expect_error(400, {"model": m, "prompt": "hi", "min_p": -0.1}, "min_p",
                          "-0.1; it must be in [0, 1)")
        self.expect_error(400, {"model": m, "prompt": "hi", "n": 0}, "n", "between 1 and 16")
        self.expect_error(400, {"model": m, "prompt": "hi", "stop": ["a", 3]}, "stop",
                          "entry 1 must be a non-empty string")
        self.expect_error(400, {"model": m, "prompt": "hi", "colour": "red"}, "colour",
                          "Unrecognized request argument supplied: colour")
        self.expect_error(400, {"model": m, "prompt": "hi", "echo": True}, "echo",
                          "not supported")
        self.expect_error(400, {"model": m, "prompt": [1, 99999]}, "prompt",
                          "not below the model's vocabulary size")
        self.expect_error(400, {"model": m, "prompt": "hi", "logprobs": 6}, "logprobs",
                          "between 0 and 5")
        self.expect_error(400, {"model": m, "prompt": [1] * 250, "max_tokens": 10}, "max_tokens",
                          "maximum context length is 256 tokens", code="context_length_exceeded")
        self.expect_error(400, {"model": m, "prompt": [1] * 256}, "prompt",
                          "maximum context length", code="context_length_exceeded")
        self.expect_error(400, {"model": m, "messages": []}, "messages", "non-empty list",
                          path="/v1/chat/completions")
        self.expect_error(400, {"model": m, "messages": [{"role": "tool", "content": "x"}]},
                          "messages", "messages[0]: role 'tool'", path="/v1/chat/completions")
        self.expect_error(400, {"model": m, "messages": [{"role": "user", "content": "x"}],
                                "top_logprobs": 2}, "top_logprobs", "needs 'logprobs': true",
                          path="/v1/chat/completions")
        self.expect_error(404, {"model": "gpt-4", "prompt": "hi"}, "model",
                          "The model 'gpt-4' does not exist", code="model_not_found")
        status, _, data = self.server.request("GET", "/v2/nothing")
        self.assertEqual(status, 404)
        self.assertEqual(json.loads(data)["error"]["code"], "unknown_url")
        status, _, data = self.server.request("GET", "/v1/completions")
        self.assertEqual(status, 405)
        # The openai client raises its own exception types on these.
        with self.assertRaises(openai.BadRequestError) as cm:
            self.complete(prompt="hi", max_tokens=0)
        self.assertEqual(cm.exception.status_code, 400)
        self.assertEqual(cm.exception.body["param"], "max_tokens")
        with self.assertRaises(openai.NotFoundError):
            self.client.completions.create(model="other", prompt="hi")

    def test_curl(self):
        base = f"http://127.0.0.1:{self.server.port}"
        body = json.dumps({"model": self.model, "prompt": "the cat", "max_tokens": 5,
                           "temperature": 0})
        out = subprocess.run(["curl", "-sS", "-H", "Content-Type: application/json", "-d", body,
                              base + "/v1/completions"], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        whole = json.loads(out.stdout)
        self.assertEqual(whole["usage"]["completion_tokens"], 5)
        stream = json.loads(body)
        stream["stream"] = True
        out = subprocess.run(["curl", "-sSN", "-d", json.dumps(stream), base + "/v1/completions"],
                             capture_output=True, text=True, timeout=60)
        lines = [l for l in out.stdout.split("\n") if l]
        self.assertTrue(all(l.startswith("data: ") for l in lines), lines)
        self.assertEqual(lines[-1], "data: [DONE]")
        text = "".join(json.loads(l[6:])["choices"][0]["text"] for l in lines[:-1])
        self.assertEqual(text, whole["choices"][0]["text"])
        out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                              base + "/v1/models/nope"], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.stdout, "404")

    def test_metrics(self):
        before = self.server.metrics()
        self.complete(prompt="the", max_tokens=4, temperature=0)
        after = self.server.metrics()
        key = 'trainyard_requests_total{endpoint="/v1/completions",code="200"}'
        self.assertEqual(after[key], before.get(key, 0) + 1)
        self.assertGreaterEqual(after["trainyard_generation_tokens_total"],
                                before["trainyard_generation_tokens_total"] + 4)
        for name in ("trainyard_prompt_tokens_total", "trainyard_queue_depth",
                     "trainyard_batch_occupancy", "trainyard_batch_slots",
                     "trainyard_generation_tokens_per_second",
                     "trainyard_time_to_first_token_seconds_count",
                     'trainyard_time_to_first_token_seconds_bucket{le="+Inf"}'):
            self.assertIn(name, after)
        self.assertEqual(after["trainyard_batch_slots"], 4)


class LimitsTest(cli_util.TempDirTest):
    """Servers with limits: the key, the body size, the queue, timeouts,
    device failures, disconnects. A slow device is the `faulty` test
    backend without a fault (reference kernels, node by node: about 300
    tokens/s on this model on the 2-core CI machine, so a request of 480
    tokens outlives a 0.3 s limit several times over)."""

    def start(self, *args, **kw):
        server = Server(*args, **kw)
        self.addCleanup(server.close)
        return server

    def test_api_key(self):
        s = self.start("--api-key", "sesame")
        with self.assertRaises(openai.AuthenticationError) as cm:
            s.client(api_key="wrong").models.list()
        self.assertEqual(cm.exception.status_code, 401)
        self.assertEqual(cm.exception.body["code"], "invalid_api_key")
        self.assertEqual(len(s.client(api_key="sesame").models.list().data), 1)
        status, headers, _ = s.request("POST", "/v1/completions", {"model": s.name, "prompt": "x"})
        self.assertEqual(status, 401)
        self.assertEqual(headers.get("WWW-Authenticate"), "Bearer")
        self.assertEqual(s.request("GET", "/health")[0], 200)  # no key needed
        out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H",
                              "Authorization: Bearer sesame",
                              f"http://127.0.0.1:{s.port}/metrics"], capture_output=True, text=True)
        self.assertEqual(out.stdout, "200")
        self.assertEqual(s.stop(), 0)

    def test_body_too_large(self):
        s = self.start("--max-body", "1000")
        body = json.dumps({"model": s.name, "prompt": "x" * 2000}).encode()
        status, data = s.post("/v1/completions", body, raw=True)
        self.assertEqual(status, 413)
        self.assertEqual(data["error"]["code"], "request_too_large")
        # Chunked, without a Content-Length: counted as it arrives.
        conn = s.connection()
        conn.putrequest("POST", "/v1/completions")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        for _ in range(4):
            piece = b"x" * 500
            conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        conn.send(b"0\r\n\r\n")
        self.assertEqual(conn.getresponse().status, 413)
        conn.close()
        self.assertEqual(s.stop(), 0)

    def test_queue_full_and_timeout(self):
        s = self.start("--backend", "faulty", "--max-batch", "1", "--max-queue", "0", "--ctx",
                       "512", "--request-timeout", "0.3", plugin_path=cli_util.CFG.faulty_dir)
        client = s.client()
        first = client.completions.create(model=s.name, prompt="the", max_tokens=480,
                                          temperature=1, seed=1, stream=True,
                                          extra_body={"ignore_eos": True})
        next(iter(first))  # running: the one slot is busy
        with self.assertRaises(openai.RateLimitError) as cm:
            client.completions.create(model=s.name, prompt="the", max_tokens=2)
        self.assertEqual(cm.exception.status_code, 429)
        self.assertEqual(cm.exception.body["code"], "queue_full")
        # The stream outlives --request-timeout: an error event, then [DONE].
        with self.assertRaises(openai.APIError) as cm:
            for _ in first:
                pass
        self.assertIn("--request-timeout 0.3", str(cm.exception))
        status, data = s.post("/v1/completions", {"model": s.name, "prompt": "the",
                                                  "max_tokens": 480, "temperature": 1,
                                                  "ignore_eos": True})
        self.assertEqual(status, 504)
        self.assertEqual(data["error"]["code"], "timeout")
        self.assertEqual(s.metrics()["trainyard_requests_timed_out_total"], 2)
        self.assertEqual(s.stop(), 0)

    def test_internal_error(self):
        s = self.start("--backend", "faulty?fault=nan:matmul", plugin_path=cli_util.CFG.faulty_dir)
        status, data = s.post("/v1/completions", {"model": s.name, "prompt": "the",
                                                  "max_tokens": 3})
        self.assertEqual(status, 500)
        error = data["error"]
        self.assertEqual((error["type"], error["code"]), ("server_error", "internal_error"))
        error_id = error["message"].split("internal error ")[1].split(":")[0]
        self.assertTrue(error_id.startswith("err-"), error)
        self.assertEqual(s.request("GET", "/health")[0], 200)  # still serving
        self.assertEqual(s.stop(), 0)
        log = s.stderr()
        self.assertIn(error_id, log)
        self.assertIn("NaN", log.split(error_id)[1].split("\n")[0].replace("nan", "NaN"))

    def test_disconnect_frees_the_slot(self):
        s = self.start("--backend", "faulty", "--max-batch", "1", "--ctx", "512",
                       plugin_path=cli_util.CFG.faulty_dir)
        body = {"model": s.name, "prompt": "the", "max_tokens": 480, "temperature": 1,
                "stream": True, "ignore_eos": True}
        conn = s.connection()
        conn.request("POST", "/v1/completions", body=json.dumps(body))
        resp = conn.getresponse()
        resp.readline()  # the first chunk came: it is running
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        # A non-streaming client that gives up.
        raw = socket.create_connection(("127.0.0.1", s.port))
        data = json.dumps(dict(body, stream=False)).encode()
        raw.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(data), data))
        time.sleep(0.05)
        raw.close()
        self.assertTrue(wait_for(lambda: s.metrics()["trainyard_requests_cancelled_total"] == 2,
                                 timeout=20), s.metrics())
        # The one slot is free again at once: a short request goes through.
        started = time.time()
        r = s.client().completions.create(model=s.name, prompt="the", max_tokens=2)
        self.assertEqual(r.usage.completion_tokens, 2)
        self.assertLess(time.time() - started, 20)
        self.assertEqual(s.metrics()["trainyard_requests_in_flight"], 0)
        self.assertEqual(s.stop(), 0)


class ShutdownTest(cli_util.TempDirTest):
    """SIGTERM during streams: no new connections, streams finish (or are
    cancelled at --shutdown-timeout with an error event), exit 0."""

    def streams(self, s, count, max_tokens):
        results, threads, started = [None] * count, [], threading.Barrier(count + 1)

        def one(i):
            conn = s.connection()
            conn.request("POST", "/v1/completions", body=json.dumps(
                {"model": s.name, "prompt": "the", "max_tokens": max_tokens, "temperature": 1,
                 "seed": i, "stream": True, "ignore_eos": True}))
            resp = conn.getresponse()
            first = resp.readline()
            started.wait()
            results[i] = [json.loads(first[6:])] + sse_events(resp)
            conn.close()

        for i in range(count):
            threads.append(threading.Thread(target=one, args=(i,)))
            threads[-1].start()
        started.wait(timeout=120)
        return results, threads

    def test_one_thread_takes_the_signals(self):
        """SIGTERM, SIGINT and SIGHUP are taken by the process's one signal thread
        (stop_signals.h), which the server arms: every other thread blocks
        them. A second taker (the server's own sigwait once did it) raced
        the signal thread, which then and then ended the server with the
        default action (exit -15) instead of the graceful stop."""
        s = Server("--backend", "cpu?threads=2")
        self.addCleanup(s.close)
        takers = []
        for tid in os.listdir(f"/proc/{s.proc.pid}/task"):
            with open(f"/proc/{s.proc.pid}/task/{tid}/status") as f:
                blocked = int(re.search(r"^SigBlk:\s*([0-9a-f]+)$", f.read(), re.M).group(1), 16)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                if not blocked >> (sig - 1) & 1:
                    takers.append((tid, sig.name))
        self.assertEqual(sorted(sig for _, sig in takers), ["SIGHUP", "SIGINT", "SIGTERM"],
                         takers)
        self.assertEqual(len({tid for tid, _ in takers}), 1, takers)
        self.assertEqual(s.stop(), 0)

    def test_streams_finish_on_sighup(self):
        """SIGHUP (a dropped SSH session) drains like SIGTERM: it once cut
        the streams without an error event or [DONE]."""
        self.test_streams_finish(signal.SIGHUP)

    def test_streams_finish(self, sig=signal.SIGTERM):
        s = Server("--backend", "faulty", "--max-batch", "4", "--shutdown-timeout", "60",
                   plugin_path=cli_util.CFG.faulty_dir)
        self.addCleanup(s.close)
        kept = s.connection()  # opened before the signal: it stays served
        kept.request("GET", "/health")
        self.assertEqual(kept.getresponse().read(), b'{"status":"ok"}')
        results, threads = self.streams(s, 3, 120)
        s.proc.send_signal(sig)

        def health():
            kept.request("GET", "/health")
            r = kept.getresponse()
            r.read()
            return r.status == 503
        # While the streams finish: unhealthy, and no new requests.
        self.assertTrue(wait_for(health, timeout=30))
        kept.request("POST", "/v1/completions", body=json.dumps(
            {"model": s.name, "prompt": "the", "max_tokens": 2}))
        r = kept.getresponse()
        self.assertEqual(r.status, 503)
        self.assertEqual(json.loads(r.read())["error"]["code"], "shutting_down")
        kept.close()
        for t in threads:
            t.join(timeout=120)
        self.assertEqual(s.proc.wait(timeout=60), 0)
        for events in results:
            self.assertEqual(events[-1], "[DONE]")
            self.assertIn(events[-2]["choices"][0]["finish_reason"], ("length", "stop"))
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", s.port), timeout=5)
        self.assertIn("%s: no new requests" % sig.name, s.stderr())

    def test_deadline_cancels(self):
        s = Server("--backend", "faulty", "--max-batch", "2", "--ctx", "512", "--shutdown-timeout",
                   "0.2", plugin_path=cli_util.CFG.faulty_dir)
        self.addCleanup(s.close)
        results, threads = self.streams(s, 2, 480)
        # A third, not streaming, waits in the queue on a kept connection.
        conn = s.connection()
        out = {}
        waiter = threading.Thread(target=lambda: out.update(
            r=(conn.request("POST", "/v1/completions", body=json.dumps(
                {"model": s.name, "prompt": "the", "max_tokens": 5})), conn.getresponse())[1]))
        waiter.start()
        self.assertTrue(wait_for(lambda: s.metrics()["trainyard_queue_depth"] == 1))
        started = time.time()
        s.proc.send_signal(signal.SIGTERM)
        for t in threads + [waiter]:
            t.join(timeout=60)
        self.assertEqual(s.proc.wait(timeout=60), 0)
        self.assertLess(time.time() - started, 15)
        for events in results:
            self.assertEqual(events[-1], "[DONE]")
            self.assertEqual(events[-2]["error"]["code"], "shutting_down")
        self.assertEqual(out["r"].status, 503)
        self.assertIn("cancelled at the deadline", s.stderr())


class HttpTest(cli_util.TempDirTest):
    """The HTTP layer under clients that are slow, odd or hostile (issue
    33): message framing refused at once with its status (RFC 9112 6.1,
    6.3), HEAD, the bearer scheme in any case, --read-timeout (a deadline
    for a request's head and body, which answers and streams never hit),
    and /health and /metrics while every slot and the queue are taken."""

    def start(self, *args, **kw):
        server = Server(*args, **kw)
        self.addCleanup(server.close)
        return server

    def test_framing(self):
        s = self.start("--max-body", "1000", "--read-timeout", "1")

        def send(head, body=b""):
            return raw_request(s.port, head.replace(b"\n", b"\r\n") + b"\r\n" + body)

        post = b"POST /v1/completions HTTP/1.1\nHost: x\n"
        # Two different lengths: 400 at once, and the connection ends.
        status, headers, body, took = send(post + b"Content-Length: 2\nContent-Length: 40\n",
                                           b"{}")
        self.assertEqual((status, json.loads(body)["error"]["code"]), (400, "invalid_framing"))
        self.assertIn("different values", json.loads(body)["error"]["message"])
        self.assertEqual(headers.get("connection"), "close")
        self.assertLess(took, 1)
        # The same length twice is one length.
        status, _, body, _ = send(b"GET /health HTTP/1.1\nHost: x\nContent-Length: 0\n"
                                  b"Content-Length: 0\n")
        self.assertEqual((status, body), (200, b'{"status":"ok"}'))
        # Both framings: 400.
        status, _, body, _ = send(post + b"Content-Length: 5\nTransfer-Encoding: chunked\n",
                                  b"0\r\n\r\n")
        self.assertEqual(status, 400)
        self.assertIn("both Transfer-Encoding and Content-Length",
                      json.loads(body)["error"]["message"])
        # A transfer coding the server does not know: 501.
        status, _, body, _ = send(post + b"Transfer-Encoding: gzip\n")
        self.assertEqual((status, json.loads(body)["error"]["code"]),
                         (501, "unsupported_transfer_encoding"))
        # A chunk of 2^64 - 1 bytes: 413 as soon as --max-body is passed,
        # not when the client is done.
        status, headers, body, took = send(post + b"Transfer-Encoding: chunked\n",
                                           b"FFFFFFFFFFFFFFFF\r\n" + b"x" * 1500)
        self.assertEqual((status, json.loads(body)["error"]["code"]), (413, "request_too_large"))
        self.assertEqual(headers.get("connection"), "close")
        self.assertLess(took, 1)
        # A chunk size past 64 bits: libmicrohttpd's own 413.
        status, _, _, took = send(post + b"Transfer-Encoding: chunked\n",
                                  b"10000000000000000\r\nxx")
        self.assertEqual(status, 413)
        self.assertLess(took, 1)
        # A huge chunk that then stalls under --max-body: the read deadline.
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(post.replace(b"\n", b"\r\n") + b"Transfer-Encoding: chunked\r\n\r\n"
                     b"FFFFFFFFFFFFFFFF\r\nxx")
        took = seconds_until_closed(sock, 10)
        sock.close()
        self.assertIsNotNone(took, "a stalled chunked body kept its connection")
        self.assertLess(took, 3)
        self.assertEqual(s.request("GET", "/health")[0], 200)
        self.assertEqual(s.stop(), 0)

    def test_head_and_bearer_scheme(self):
        s = self.start("--api-key", "sesame")
        _, get_headers, get_body = s.request("GET", "/health")
        status, headers, body = s.request("HEAD", "/health")
        self.assertEqual((status, body), (200, b""))
        self.assertEqual(headers["Content-Length"], str(len(get_body)))
        self.assertEqual(headers["Content-Type"], get_headers["Content-Type"])
        auth = {"Authorization": "Bearer sesame"}
        self.assertEqual(s.request("HEAD", "/v1/models", headers=auth)[::2], (200, b""))
        self.assertEqual(s.request("HEAD", "/metrics", headers=auth)[::2], (200, b""))
        status, headers, _ = s.request("HEAD", "/v1/completions", headers=auth)
        self.assertEqual((status, headers.get("Allow")), (405, "POST"))
        status, headers, body = s.request("DELETE", "/health")
        self.assertEqual((status, headers.get("Allow")), (405, "GET, HEAD"))
        self.assertIn("use GET or HEAD", json.loads(body)["error"]["message"])
        # The scheme's name is case-insensitive (RFC 9110 11.1); the key is not.
        for value, want in (("bearer sesame", 200), ("BEARER  sesame", 200),
                            ("Bearer Sesame", 401), ("Bearersesame", 401), ("Basic sesame", 401),
                            ("bearer sesame2", 401), ("bearer sesam", 401)):
            with self.subTest(authorization=value):
                status = s.request("GET", "/v1/models", headers={"Authorization": value})[0]
                self.assertEqual(status, want)
        self.assertEqual(s.stop(), 0)

    def test_read_timeout(self):
        s = self.start("--read-timeout", "1")
        # A head that never ends: closed after about a second.
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(b"GET /health HTTP/1.1\r\n")
        took = seconds_until_closed(sock, 10)
        sock.close()
        self.assertIsNotNone(took, "an unfinished head kept its connection")
        self.assertTrue(0.8 < took < 3, took)
        # A head that trickles in, a byte every 0.2 s: the deadline is for
        # the whole head, not for the silence between bytes.
        sock = socket.create_connection(("127.0.0.1", s.port))
        started, closed = time.time(), False
        for byte in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.2)
            if time.time() - started > 5:
                break
        closed = closed or seconds_until_closed(sock, 1) is not None
        sock.close()
        self.assertTrue(closed, "a trickled head kept its connection")
        # A kept-alive connection that sends nothing more after an answer.
        conn = s.connection()
        conn.request("GET", "/health")
        self.assertEqual(conn.getresponse().read(), b'{"status":"ok"}')
        took = seconds_until_closed(conn.sock, 10)
        conn.close()
        self.assertTrue(took is not None and took < 3, took)
        self.assertGreaterEqual(s.metrics()["trainyard_connections_read_timeout_total"], 3)
        self.assertEqual(s.request("GET", "/health")[0], 200)
        self.assertEqual(s.stop(), 0)
        r = run(["serve", "--model", serve_util.make_model(), "--read-timeout", "0"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--read-timeout must be a number of seconds > 0", r.stderr)

    def test_streams_outlive_the_read_timeout(self):
        """Streams and waiting requests are answers, not reads: one slot and
        a 0.5 s --read-timeout, two 192-token streams (the second waits for
        the slot, silent, for over a second) and a request that is not
        streamed all finish whole. (Short answers: a sanitizer build is
        several times slower and the waiting stream must not outlast its
        client's own socket timeout.)"""
        s = self.start("--backend", "faulty", "--max-batch", "1", "--ctx", "512",
                       "--read-timeout", "0.5", plugin_path=cli_util.CFG.faulty_dir)
        results = {}

        def stream(i):
            conn = s.connection(timeout=60)
            conn.request("POST", "/v1/completions", body=json.dumps(
                {"model": s.name, "prompt": "the", "max_tokens": 192, "temperature": 1,
                 "seed": i, "stream": True, "ignore_eos": True}))
            resp = conn.getresponse()
            results[i] = sse_events(resp)
            conn.close()

        def whole():
            results["whole"] = s.post("/v1/completions", {
                "model": s.name, "prompt": "the", "max_tokens": 96, "temperature": 1,
                "ignore_eos": True})

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(2)]
        threads.append(threading.Thread(target=whole))
        started = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        self.assertGreater(time.time() - started, 1.5)  # several read timeouts long
        for i in range(2):
            self.assertEqual(results[i][-1], "[DONE]")
            self.assertEqual(results[i][-2]["usage"]["completion_tokens"], 192)
        status, data = results["whole"]
        self.assertEqual((status, data["usage"]["completion_tokens"]), (200, 96))
        self.assertEqual(s.metrics()["trainyard_connections_read_timeout_total"], 0)
        self.assertEqual(s.stop(), 0)

    def test_health_and_metrics_while_busy(self):
        """The one slot runs a stream and the queue (0) is full: generation
        gets 429, /health and /metrics answer within a second."""
        s = self.start("--backend", "faulty", "--max-batch", "1", "--max-queue", "0", "--ctx",
                       "512", plugin_path=cli_util.CFG.faulty_dir)
        conn = s.connection()
        conn.request("POST", "/v1/completions", body=json.dumps(
            {"model": s.name, "prompt": "the", "max_tokens": 480, "temperature": 1,
             "stream": True, "ignore_eos": True}))
        resp = conn.getresponse()
        resp.readline()  # running
        status, _ = s.post("/v1/completions", {"model": s.name, "prompt": "the", "max_tokens": 2})
        self.assertEqual(status, 429)
        for path in ("/health", "/metrics"):
            started = time.time()
            status, _, body = s.request("GET", path)
            self.assertEqual(status, 200, body)
            self.assertLess(time.time() - started, 1, path)
        self.assertEqual(s.metrics()["trainyard_requests_in_flight"], 1)
        resp.close()
        conn.close()
        self.assertEqual(s.stop(), 0)


class OptionsTest(cli_util.TempDirTest):
    """The options LimitsTest and ShutdownTest do not show (the option audit
    of test_options_cli.py points here)."""

    def start(self, *args, **kw):
        server = Server(*args, **kw)
        self.addCleanup(server.close)
        return server

    def test_port_in_use(self):
        """Issue 33: a port another socket holds gives one message, in the
        user's terms; libmicrohttpd's own "Failed to bind to port 0" (the
        port of an address given whole) is not printed before it."""
        model = serve_util.make_model()
        holder = socket.socket()
        self.addCleanup(holder.close)
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        r = run(["serve", "--model", model, "--host", "127.0.0.1", "--port", str(port)])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("cannot listen on 127.0.0.1 port %d (in use" % port, r.stderr)
        self.assertNotIn("Failed to bind", r.stderr)
        self.assertNotIn("http: ", r.stderr)

    def test_each_option(self):
        model = serve_util.make_model()
        # --port: that port; --host: loopback names; --model-name; -v.
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        cmd = [cli_util.CFG.trainyard, "-v", "serve", "--model", model, "--port", str(port),
               "--host", "localhost", "--model-name", "tiny", "--dtype", "bf16", "--max-batch",
               "2", "--ctx", "64", "--prefill-chunk", "4"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = proc.stdout.readline()
        self.assertIn(f"listening on http://localhost:{port}/v1 (model 'tiny', 2 slots of 64 "
                      f"tokens", line)
        import openai as oa
        client = oa.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        self.assertEqual([m.id for m in client.models.list().data], ["tiny"])
        r = client.completions.create(model="tiny", prompt="the cat", max_tokens=3, temperature=0)
        self.assertEqual(r.usage.completion_tokens, 3)
        with self.assertRaises(oa.BadRequestError) as cm:  # --ctx 64
            client.completions.create(model="tiny", prompt="the cat", max_tokens=64)
        self.assertIn("maximum context length is 64 tokens", str(cm.exception))
        metrics = {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1]) for l in subprocess.run(
            ["curl", "-s", f"http://127.0.0.1:{port}/metrics"], capture_output=True,
            text=True).stdout.splitlines() if l and l[0] != "#"}
        self.assertEqual(metrics["trainyard_batch_slots"], 2)              # --max-batch
        # The steps' wall time and its parts: the waits for the runs are
        # inside it (the reads too; serve overlaps the host's work with the
        # runs, so they are in the waits and read_seconds stays 0).
        step_s = metrics["trainyard_engine_step_seconds_total"]
        self.assertGreater(metrics["trainyard_engine_run_seconds_total"], 0)
        self.assertEqual(metrics["trainyard_engine_read_seconds_total"], 0)
        self.assertLessEqual(metrics["trainyard_engine_run_seconds_total"]
                             + metrics["trainyard_engine_read_seconds_total"], step_s)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0)
        self.assertIn("ready after", err)                                   # -v
        self.assertIn(": 3 prompt tokens, 1 choices", err)
        # --dtype: bf16 logits differ from f32 ones; bf16-mixed (f32 weights,
        # bf16 matmuls: logits in bf16) too.
        lps = []
        for dtype in ("f32", "bf16", "bf16-mixed"):
            s = self.start("--dtype", dtype, "--ctx", "64")
            r = s.client().completions.create(model=s.name, prompt="the cat", max_tokens=2,
                                             temperature=0, logprobs=0)
            lps.append(r.choices[0].logprobs.token_logprobs[0])
            self.assertEqual(s.stop(), 0)
        for other in lps[1:]:
            self.assertNotEqual(lps[0], other)
            self.assertLess(abs(lps[0] - other), 0.1)
        r = run(["serve", "--model", model, "--dtype", "i32"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--dtype must be f32, bf16, f16, f64, bf16-mixed or f16-mixed", r.stderr)
        # --prefill-chunk: prompts longer than a chunk give what one chunk gives;
        # --prefill-budget (several chunks a step) gives the same tokens too.
        prompt = list(range(20, 60))
        outs = []
        for extra in (["--prefill-chunk", "3"], ["--prefill-chunk", "64"],
                      ["--prefill-chunk", "3", "--prefill-budget", "12"]):
            s = self.start(*extra, "--ctx", "64")
            r = s.client().completions.create(model=s.name, prompt=prompt, max_tokens=6,
                                             temperature=0, extra_body={"return_token_ids": True})
            outs.append(r.choices[0].model_extra["token_ids"])
            self.assertEqual(s.stop(), 0)
        self.assertEqual(outs[0], outs[1])
        self.assertEqual(outs[0], outs[2])
        # --speculate: prompt lookup drafts; the same tokens (deterministic
        # kernels: a draft's row is computed as in a step of its own).
        prompt = list(range(20, 30)) * 4
        outs = []
        for extra in ([], ["--speculate", "4"]):
            s = self.start(*extra, "--ctx", "96", "--deterministic")
            if extra:
                self.assertIn("speculative decoding: up to 4 drafted tokens",
                              s.proc.stdout.readline())
            r = s.client().completions.create(model=s.name, prompt=prompt, max_tokens=24,
                                             temperature=0, extra_body={"return_token_ids": True})
            outs.append(r.choices[0].model_extra["token_ids"])
            # Streamed: every token's chunk, also when a step hands out
            # several tokens of the choice (accepted drafts) and the last
            # of them ends it; the usage counts what the stream carried.
            chunks = list(s.client().completions.create(
                model=s.name, prompt=prompt, max_tokens=24, temperature=0, stream=True,
                extra_body={"return_token_ids": True}))
            ids = [t for c in chunks if c.choices for t in c.choices[0].model_extra.get("token_ids") or []]
            self.assertEqual(ids, outs[-1], extra)
            self.assertEqual(chunks[-1].usage.completion_tokens, len(ids))
            m = s.metrics()
            self.assertEqual(s.stop(), 0)
        self.assertEqual(outs[0], outs[1])
        self.assertGreater(m["trainyard_speculative_draft_tokens_total"], 0, m)
        self.assertGreater(m["trainyard_speculative_accepted_tokens_total"], 0, m)
        for bad in ("17", "-2", "four"):
            r = run(["serve", "--model", model, "--speculate", bad])
            self.assertEqual(r.returncode, 2)
            self.assertIn("--speculate must be an integer in 0..16", r.stderr)
        r = run(["serve", "--model", model, "--prefill-budget", "0"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--prefill-budget must be an integer >= 1", r.stderr)
        r = run(["serve", "--model", model, "--ctx", "8", "--prefill-chunk", "9"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--prefill-chunk 9 is larger than --ctx 8", r.stderr)
        r = run(["serve", "--model", model, "--ctx", "9999"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("--ctx 9999 exceeds the model's 512 positions", r.stderr)
        # --chat-template: the JSON form on a model without a template; an
        # unknown template in tokenizer_config.json stops the start.
        bare = os.path.join(self.tmp, "bare")
        shutil.copytree(model, bare)
        os.remove(os.path.join(bare, "tokenizer_config.json"))
        s = self.start(model=bare)
        status, data = s.post("/v1/chat/completions", {"model": s.name, "messages": [
            {"role": "user", "content": "hi"}]})
        self.assertEqual(status, 400)
        self.assertIn("--chat-template FILE", data["error"]["message"])
        self.assertEqual(s.stop(), 0)
        form = os.path.join(self.tmp, "form.json")
        with open(form, "w") as f:
            json.dump({"user": "U: {content}\n", "assistant": "A: {content}\n",
                       "generation_prompt": "A:", "stop": ["\nU:"]}, f)
        s = self.start("--chat-template", form, model=bare)
        r = s.client().chat.completions.create(model=s.name, max_tokens=4, temperature=0,
                                               messages=[{"role": "user", "content": "hi"}])
        tokens = run(["tokenize", "--tokenizer", os.path.join(bare, "tokenizer.json")],
                     stdin="U: hi\nA:").stdout.split()
        self.assertEqual(r.usage.prompt_tokens, len(tokens))
        self.assertEqual(s.stop(), 0)
        with open(os.path.join(bare, "tokenizer_config.json"), "w") as f:
            json.dump({"chat_template": "{% for m in messages %}<start_of_turn>{{ m.content }}"
                                        "{% endfor %}"}, f)
        r = run(["serve", "--model", bare])
        self.assertEqual(r.returncode, 1)
        self.assertIn("belongs to no family Trainyard recognizes", r.stderr)
        self.assertIn("--chat-template FILE", r.stderr)

    def test_connection_limits(self):
        """--max-connections and --max-connections-per-client: connections
        past either are closed at once, without an answer."""

        def closed_among(port, count, source):
            socks = [socket.create_connection(("127.0.0.1", port), timeout=5,
                                              source_address=(source, 0)) for _ in range(count)]
            time.sleep(0.5)
            readable, _, _ = select.select(socks, [], [], 0.5)
            gone = 0
            for sock in readable:
                try:
                    gone += sock.recv(1) == b""
                except ConnectionResetError:
                    gone += 1
            return socks, gone

        s = self.start("--max-connections", "3", "--max-connections-per-client", "0")
        socks, gone = closed_among(s.port, 4, "127.0.0.2")
        self.assertEqual(gone, 1)
        for sock in socks:
            sock.close()

        def health():  # the server may count a closed connection a moment longer
            try:
                return s.request("GET", "/health")[0] == 200
            except ConnectionError:
                return False

        self.assertTrue(wait_for(health, timeout=10))
        self.assertEqual(s.stop(), 0)
        s = self.start("--max-connections-per-client", "2")
        socks, gone = closed_among(s.port, 3, "127.0.0.2")
        self.assertEqual(gone, 1)
        self.assertEqual(s.request("GET", "/health")[0], 200)  # another address
        for sock in socks:
            sock.close()
        self.assertEqual(s.stop(), 0)
        model = serve_util.make_model()
        for args, message in (
                (["--max-connections", "0"], "--max-connections must be an integer in 1..1048576"),
                (["--max-connections-per-client", "-1"],
                 "--max-connections-per-client must be an integer in 0..1048576"),
                (["--max-connections", "4", "--max-connections-per-client", "5"],
                 "--max-connections-per-client 5 is larger than --max-connections 4")):
            r = run(["serve", "--model", model] + args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(message, r.stderr)


def main():
    if openai is None:
        print("SKIP: the openai package is missing (scripts/install-deps.sh installs it)")
        return 77
    if not shutil.which("curl"):
        print("SKIP: curl is missing (scripts/install-deps.sh installs it)")
        return 77
    try:
        return cli_util.main("--faulty-dir")
    finally:
        serve_util.remove_model()


if __name__ == "__main__":
    sys.exit(main())
