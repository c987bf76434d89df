"""`trainyard serve` under load and under garbage (issue 15, acceptance 2
and 3), standard library only:

- LoadTest: 64 concurrent streaming clients x 32 tokens against loopback,
  all at once; every stream must end with [DONE] after exactly 32 tokens,
  with zero errors, in under a minute (the whole test, server included);
- FuzzTest: a few hundred mutated, truncated, deeply nested, huge-number and
  invalid-UTF-8 request bodies; every one gets an HTTP answer (never a
  dropped connection or a hang), the server keeps serving and exits 0.
(The parser alone is fuzzed by tests/fuzz/fuzz_serve_request.c.)"""
import json
import os
import random
import sys
import threading
import time
import unittest

import cli_util
import serve_util
from serve_util import Server, sse_events

CLIENTS, TOKENS = 64, 32


class LoadTest(unittest.TestCase):
    def test_64_streaming_clients(self):
        started = time.time()
        s = Server("--max-batch", "16", "--ctx", "128")
        self.addCleanup(s.close)
        results, errors = [None] * CLIENTS, []
        barrier = threading.Barrier(CLIENTS)

        def client(i):
            try:
                conn = s.connection(timeout=60)
                barrier.wait(timeout=60)
                t0 = time.time()
                conn.request("POST", "/v1/completions", body=json.dumps(
                    {"model": s.name, "prompt": "the cat sat on the mat " * (1 + i % 4),
                     "max_tokens": TOKENS, "temperature": 1.0, "seed": i, "stream": True,
                     "ignore_eos": True, "return_token_ids": True}))
                resp = conn.getresponse()
                if resp.status != 200:
                    raise AssertionError(f"client {i}: HTTP {resp.status} {resp.read()!r}")
                first, tokens, events = None, 0, []
                for event in sse_events(resp):
                    if first is None:
                        first = time.time() - t0
                    events.append(event)
                    if event != "[DONE]":
                        if "error" in event:
                            raise AssertionError(f"client {i}: {event}")
                        tokens += len(event["choices"][0].get("token_ids") or []) \
                            if event["choices"] else 0
                conn.close()
                self.assertEqual(events[-1], "[DONE]")
                self.assertEqual(events[-2]["usage"]["completion_tokens"], TOKENS)
                results[i] = (tokens, first, time.time() - t0)
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(f"client {i}: {e!r}")

        t0 = time.time()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        wall = time.time() - t0
        self.assertEqual(errors, [])
        self.assertTrue(all(r and r[0] == TOKENS for r in results), results)
        metrics = s.metrics()
        self.assertEqual(s.stop(), 0)
        total = time.time() - started
        ttft = sorted(r[1] for r in results)
        print(f"{CLIENTS} clients x {TOKENS} tokens: {wall:.2f} s, "
              f"{CLIENTS * TOKENS / wall:.0f} tokens/s, first token median {ttft[CLIENTS // 2]:.3f} s, "
              f"worst {ttft[-1]:.3f} s; decode occupancy "
              f"{metrics['trainyard_decode_tokens_total'] / metrics['trainyard_decode_rows_total']:.2f}"
              f"; whole test {total:.1f} s", file=sys.stderr)
        self.assertEqual(metrics['trainyard_requests_total{endpoint="/v1/completions",code="200"}'],
                         CLIENTS)
        self.assertLess(total, 60)


def mutations(rng, seeds):
    """Bodies: the seeds, byte-mutated, truncated, spliced, and specials."""
    specials = [b"", b"{", b"null", b"[]", b'"x"', b"{}" * 1000, b"[" * 5000 + b"]" * 5000,
                b'{"a":' * 3000 + b"1" + b"}" * 3000,
                b'{"model": "M", "prompt": "x", "max_tokens": 1' + b"0" * 400 + b"}",
                b'{"model": "M", "prompt": "x", "temperature": 1e999999}',
                b'{"model": "M", "prompt": "\xff\xfe\xc3\x28"}',
                b'{"model": "M", "prompt": "\\ud800"}',
                b'{"model": "M", "prompt": "a\\u0000b"}',
                b'{"model": "M", "prompt": [1, -5, 2]}',
                b'{"model": "M", "prompt": [[]]}',
                b'{"model": "M", "messages": [{"role": "user", "content": [{"type": "image"}]}]}',
                b'{"model": "M", "prompt": "x", "n": 1e3}',
                b'{"model": "M", "prompt": "x", "stop": ["", "a"]}',
                bytes(range(256))]
    for body in specials + seeds:  # the seeds themselves: valid requests among them
        yield body
    for _ in range(300):
        body = bytearray(rng.choice(seeds))
        kind = rng.randrange(4)
        if kind == 0:
            for _ in range(rng.randint(1, 4)):
                body[rng.randrange(len(body))] = rng.randrange(256)
        elif kind == 1:
            body = body[:rng.randrange(len(body))]
        elif kind == 2:
            other = rng.choice(seeds)
            cut = rng.randrange(len(body))
            body = body[:cut] + other[rng.randrange(len(other)):]
        else:
            at = rng.randrange(len(body))
            body[at:at] = rng.choice([b"[", b"{", b"\\", b'"', b"9" * 30, b"\xc0\x80", b","])
        yield bytes(body)


class FuzzTest(unittest.TestCase):
    def test_bodies_never_crash(self):
        s = Server("--max-batch", "4", "--ctx", "128")
        self.addCleanup(s.close)
        corpus = os.path.join(cli_util.CFG.corpus)
        seeds = []
        for name in sorted(os.listdir(corpus)):
            with open(os.path.join(corpus, name), "rb") as f:
                data = f.read()
            # The corpus names the model "m"; the live server has its own
            # name, and short generations keep the run quick.
            seeds.append(data[1:].replace(b'"m"', json.dumps(s.name).encode()))
        seed = int(os.environ.get("TY_TEST_SEED", time.time_ns() % 1000000))
        print(f"random seed {seed} (replay with TY_TEST_SEED={seed})", file=sys.stderr)
        rng = random.Random(seed)
        statuses = {}
        for i, body in enumerate(mutations(rng, seeds)):
            body = body.replace(b'"M"', json.dumps(s.name).encode())
            path = "/v1/chat/completions" if b"messages" in body else "/v1/completions"
            try:
                status, _, data = s.request("POST", path, body, raw=True)
            except OSError as e:
                self.fail(f"body {i} ({body[:80]!r}...): no answer: {e!r}")
            self.assertIn(status, (200, 400, 404, 413), (body[:200], data[:300]))
            if status != 200 and not data.startswith(b"data:"):
                error = json.loads(data)["error"]
                self.assertTrue(error["message"])
            statuses[status] = statuses.get(status, 0) + 1
        print(f"statuses {statuses}", file=sys.stderr)
        self.assertGreater(statuses.get(200, 0), 0)
        self.assertGreater(statuses.get(400, 0), 100)
        self.assertEqual(s.request("GET", "/health")[0], 200)
        self.assertEqual(s.stop(), 0)


def main():
    try:
        return cli_util.main("--corpus")
    finally:
        serve_util.remove_model()


if __name__ == "__main__":
    sys.exit(main())
