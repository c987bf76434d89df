#!/usr/bin/env python3
"""bench/serve_bench.py in seconds on cpu (issue 29): the tiny random GPT-2
shape, concurrency 1 and 2, 4 + 4 tokens, with the `hf` peer (skipped, with
the reason, without torch and transformers) and the `llamacpp` peer against
a stand-in llama.cpp folder (a converter and a llama-batched-bench that
print the real program's table from their arguments), so that the command
lines and the table parsing are held without a GPU. ShapeTest holds the
shapes: parameter counts of the named models, the names transformers'
LlamaConfig reads, the bf16 weights. Standard library only (plus numpy,
which --random needs; the entry skips without it)."""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..", "..")
BENCH = os.path.join(SOURCE, "bench", "serve_bench.py")
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, os.path.join(SOURCE, "bench"))
from unittest_exit import exit_code  # noqa: E402

CFG = None

# The stand-in llama-batched-bench: records its arguments, prints noise on
# stderr and, on stdout, the markdown table with made-up but consistent times
# (T_PP = 1 ms per prompt token, T_TG = 2 ms per step), leaving out a row
# whose cells exceed -c as the real program does.
FAKE_BENCH = r'''
import json, sys
a = sys.argv[1:]
json.dump(a, open(__file__ + ".args.json", "w"))
opt = lambda k: a[a.index(k) + 1]
ctx, pp, tg = int(opt("-c")), int(opt("-npp")), int(opt("-ntg"))
print("llama_model_loader: loaded meta data", file=sys.stderr)
cols = ["PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s"]
print("| " + " | ".join(cols) + " |")
print("|" + "|".join("-" * 8 for _ in cols) + "|")
for b in map(int, opt("-npl").split(",")):
    if b * (pp + tg) > ctx:
        continue
    t_pp, t_tg = 0.001 * b * pp, 0.002 * tg
    t = t_pp + t_tg
    v = [pp, tg, b, b * (pp + tg), t_pp, b * pp / t_pp, t_tg, b * tg / t_tg, t, b * (pp + tg) / t]
    print("| " + " | ".join("%.3f" % x if isinstance(x, float) else str(x) for x in v) + " |")
'''
FAKE_CONVERT = r'''
import json, sys
a = sys.argv[1:]
json.dump(a, open(__file__ + ".args.json", "w"))
open(a[a.index("--outfile") + 1], "wb").write(b"GGUF")
'''


def have(*modules):
    try:
        for m in modules:
            __import__(m)
        return True
    except ImportError:
        return False


def fake_llamacpp(folder):
    os.makedirs(os.path.join(folder, "build", "bin"))
    bench = os.path.join(folder, "build", "bin", "llama-batched-bench")
    with open(bench, "w") as f:
        f.write("#!" + sys.executable + "\n" + FAKE_BENCH)
    os.chmod(bench, 0o755)
    with open(os.path.join(folder, "convert_hf_to_gguf.py"), "w") as f:
        f.write(FAKE_CONVERT)
    return bench


def serve_bench(*args, timeout=120):
    return subprocess.run([sys.executable, BENCH, "--trainyard", CFG.trainyard] + list(args),
                          capture_output=True, text=True, timeout=timeout)


@unittest.skipUnless(have("numpy"), "numpy is not installed (--random needs it)")
class SmokeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="ty_serve_bench_")
        cls.llamacpp = os.path.join(cls.work, "llama.cpp")
        cls.fake_bench = fake_llamacpp(cls.llamacpp)
        cls.json_path = os.path.join(cls.work, "out.json")
        cls.proc = serve_bench("--random", "tiny-gpt2", "--backend", "cpu", "--concurrency", "1,2",
                              "--prompt-len", "4", "--new-tokens", "4", "--work", cls.work,
                              "--peer", "hf", "--peer", "llamacpp",
                              "--llamacpp-dir", cls.llamacpp, "--json", cls.json_path)
        cls.out = None
        if cls.proc.returncode == 0:
            with open(cls.json_path) as f:
                cls.out = json.load(f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def setUp(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stdout + self.proc.stderr)

    def rows(self, engine):
        return {r["concurrency"]: r for r in self.out["rows"] if r["engine"] == engine}

    def test_trainyard_rows(self):
        rows = self.rows("trainyard")
        self.assertEqual(sorted(rows), [1, 2])
        for r in rows.values():
            self.assertGreater(r["tokens_per_s"], 0)
            self.assertTrue(0 < r["ttft_p50_s"] <= r["ttft_p90_s"] <= r["ttft_max_s"], r)
            self.assertLessEqual(r["ttft_mean_s"], r["ttft_max_s"])
            # The engine's step times from /metrics: parts within the whole,
            # and every step within the window between the bench's settled
            # reads of /metrics (the wall, from the clients' barrier to the
            # last token, may miss a step's edges: measured in other processes).
            m = r["ms_per_step"]
            self.assertGreater(r["engine_steps"], 0, r)
            self.assertTrue(0 < m["run"] + m["read"] <= m["step"] <= m["window"], r)
            self.assertTrue(0 < m["wall"] <= m["window"], r)
        for key in ("card", "date", "command", "server_command"):
            self.assertTrue(self.out[key], key)
        self.assertEqual(self.out["card"], "cpu")
        self.assertIn("--concurrency 1,2", self.out["command"])
        # The server: slots for the largest concurrency, a context of prompt +
        # new tokens, the chunk and budget, no per-client connection cap.
        cmd = self.out["server_command"]
        for flags in ("--max-batch 2", "--ctx 8", "--prefill-chunk 8", "--prefill-budget 2048",
                      "--max-connections-per-client 0"):
            self.assertIn(flags, cmd)
        # One table row per concurrency on stdout.
        # One table row per concurrency on stdout (as it comes, then in the
        # final table).
        rows = re.findall(r"^ +([12]) +trainyard +[0-9.]+ ", self.proc.stdout, re.M)
        self.assertEqual(rows, ["1", "2", "1", "2"], self.proc.stdout)

    def test_hf_rows(self):
        skipped = {s["peer"]: s["reason"] for s in self.out["skipped"]}
        if "hf" in skipped:
            self.assertIn("peer hf skipped: " + skipped["hf"], self.proc.stdout)
            self.skipTest("the hf peer skipped: " + skipped["hf"])
        ours, hf = self.rows("trainyard"), self.rows("hf")
        self.assertEqual(sorted(hf), [1, 2])
        for c, r in hf.items():
            self.assertGreater(r["tokens_per_s"], 0)
            self.assertAlmostEqual(r["ratio_to_trainyard"],
                                   r["tokens_per_s"] / ours[c]["tokens_per_s"])

    def test_llamacpp_rows(self):
        with open(self.fake_bench + ".args.json") as f:
            args = json.load(f)
        opt = lambda k: args[args.index(k) + 1]  # noqa: E731
        # Each sequence keeps prompt + new cells: 2 x (4 + 4).
        self.assertEqual((opt("-c"), opt("-npp"), opt("-ntg"), opt("-npl"), opt("-ngl")),
                         ("16", "4", "4", "1,2", "99"))
        gguf = opt("-m")
        self.assertTrue(gguf.endswith("tiny-gpt2-f32-f32.gguf") and os.path.exists(gguf), gguf)
        with open(os.path.join(self.llamacpp, "convert_hf_to_gguf.py.args.json")) as f:
            conv = json.load(f)
        self.assertEqual(conv[conv.index("--outtype") + 1], "f32")
        self.assertEqual(conv[0], os.path.join(self.work, "tiny-gpt2-f32"))
        rows = self.rows("llamacpp")
        self.assertEqual(sorted(rows), [1, 2])
        for b, r in rows.items():
            t_pp, t_tg = 0.001 * b * 4, 0.002 * 4
            # Completion tokens over the whole time, as the server's figure.
            self.assertAlmostEqual(r["tokens_per_s"], b * 4 / round(t_pp + t_tg, 3), places=1)
            self.assertAlmostEqual(r["s_tg_tokens_per_s"], round(b * 4 / t_tg, 3), places=2)
            self.assertAlmostEqual(r["ttft_p50_s"], round(t_pp, 3))
        # Exactly one best peer per concurrency, the fastest.
        for c in (1, 2):
            peers = [r for r in self.out["rows"] if r["concurrency"] == c
                     and r["engine"] != "trainyard"]
            best = [r for r in peers if r["best_peer"]]
            self.assertEqual(len(best), 1)
            self.assertEqual(best[0]["tokens_per_s"], max(r["tokens_per_s"] for r in peers))


@unittest.skipUnless(have("numpy"), "numpy is not installed (--random needs it)")
class FailureTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="ty_serve_bench_fail_")

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def small(self, *extra):
        return serve_bench("--random", "tiny-llama", "--concurrency", "1", "--prompt-len", "2",
                           "--new-tokens", "2", "--work", self.work, *extra)

    def test_server_that_fails_fails_the_run(self):
        r = self.small("--serve-args", "--prefill-chunk 0")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("the server did not start", r.stderr)
        self.assertIn("--prefill-chunk", r.stderr)  # the server's own message, shown

    def test_more_requests_than_one_address_may_open(self):
        # 160 requests from 127.0.0.1 at once: past serve's default cap of 128
        # connections per client address, which serve_bench lifts; with the
        # cap given back the resets fail the run, naming them. (32 tokens
        # each keep the connections open together: with 2, the first ones
        # may finish before the last ones connect, and the cap never bites.)
        many = ("--random", "tiny-gpt2", "--concurrency", "160", "--prompt-len", "2",
                "--new-tokens", "32", "--work", self.work, "--json",
                os.path.join(self.work, "many.json"))
        r = serve_bench(*many)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(self.work, "many.json")) as f:
            row = json.load(f)["rows"][0]
        self.assertEqual((row["concurrency"], row["engine"]), (160, "trainyard"))
        self.assertGreater(row["tokens_per_s"], 0)
        r = serve_bench(*many, "--serve-args", "--max-connections-per-client 128")
        self.assertNotEqual(r.returncode, 0)
        self.assertRegex(r.stderr, r"serve_bench: \d+ of 160 requests failed")

    def test_refused_requests_fail_the_run(self):
        r = self.small("--serve-args", "--api-key secret")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("serve_bench: 1 of 1 requests failed; the first: HTTP 401", r.stderr)
        self.assertIn("its stderr", r.stderr)

    def test_missing_llamacpp_build_skips_with_reason(self):
        folder = os.path.join(self.work, "llama.cpp")
        os.makedirs(folder)
        open(os.path.join(folder, "convert_hf_to_gguf.py"), "w").close()
        r = self.small("--peer", "llamacpp", "--llamacpp-dir", folder)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("peer llamacpp skipped: ", r.stdout)
        self.assertIn("bench/llamacpp_build.sh", r.stdout)

    def test_usage_errors(self):
        for args, message in ((["--peer", "llamacpp"], "--llamacpp-dir"),
                              (["--peer", "vllm"], "--peer vllm: unknown"),
                              (["--concurrency", "1,x"], "--concurrency 1,x")):
            r = serve_bench("--random", "tiny-gpt2", *args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(message, r.stderr)


class ShapeTest(unittest.TestCase):
    def test_parameter_counts(self):
        import serve_bench as sb
        counts = {k: sum(math.prod(s) for s in sb.parameter_shapes(sb.SHAPES[k]).values())
                  for k in ("gpt2-124m", "llama-3.2-1b", "llama-1b")}
        # GPT-2's, Llama-3.2-1B's and TinyLlama-1.1B's published counts.
        self.assertEqual(counts, {"gpt2-124m": 124439808, "llama-3.2-1b": 1235814400,
                                  "llama-1b": 1100048384})

    @unittest.skipUnless(have("transformers"), "transformers is not installed")
    def test_transformers_reads_llama_3_2(self):
        import serve_bench as sb
        from transformers import LlamaConfig
        shape = sb.SHAPES["llama-3.2-1b"]
        c = LlamaConfig.from_dict(dict(shape))
        # Every name is one LlamaConfig has, but the RoPE fields, which
        # transformers 5 folds into rope_parameters.
        unknown = [k for k in shape if not hasattr(c, k)]
        self.assertLessEqual(set(unknown), {"rope_theta", "rope_scaling"}, unknown)
        rope = getattr(c, "rope_parameters", None) or dict(c.rope_scaling, rope_theta=c.rope_theta)
        self.assertEqual(rope["rope_type"], "llama3")
        self.assertEqual((rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"],
                          rope["original_max_position_embeddings"], rope["rope_theta"]),
                         (32.0, 1.0, 4.0, 8192, 500000.0))
        self.assertEqual((c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers,
                          c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                          c.max_position_embeddings, c.tie_word_embeddings),
                         (128256, 2048, 8192, 16, 32, 8, 64, 131072, True))

    @unittest.skipUnless(have("numpy"), "numpy is not installed")
    def test_bf16_weights_round_the_f32_ones(self):
        import numpy as np
        import serve_bench as sb
        work = tempfile.mkdtemp(prefix="ty_serve_bench_bf16_")
        self.addCleanup(shutil.rmtree, work, True)
        tok = os.path.join(SOURCE, "tests", "fixtures", "tokenizers", "gpt2", "tokenizer.json")
        tensors = {}
        for dtype in ("f32", "bf16"):
            folder = os.path.join(work, dtype)
            sb.write_random_model(sb.SHAPES["tiny-llama"], folder, tok, dtype)
            self.assertFalse(os.path.exists(os.path.join(folder, "model.safetensors.part")))
            with open(os.path.join(folder, "model.safetensors"), "rb") as f:
                data = f.read()
            n = int.from_bytes(data[:8], "little")
            header = json.loads(data[8:8 + n])
            e = header["model.layers.0.mlp.up_proj.weight"]
            self.assertEqual(e["dtype"], "F32" if dtype == "f32" else "BF16")
            raw = data[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]]
            if dtype == "bf16":
                wide = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
                tensors[dtype] = wide.view(np.float32)
            else:
                tensors[dtype] = np.frombuffer(raw, np.float32)
        a, b = tensors["f32"], tensors["bf16"]
        self.assertEqual(a.shape, b.shape)
        self.assertTrue(np.all(np.abs(a - b) <= np.abs(a) * 2.0 ** -8), "not rounded to bf16")
        self.assertGreater(np.std(a), 0.015)  # normal(0, 0.02), not zeros


def main():
    global CFG
    p = argparse.ArgumentParser()
    p.add_argument("--trainyard", required=True)
    CFG, rest = p.parse_known_args()
    return exit_code(unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2).result)


if __name__ == "__main__":
    sys.exit(main())
