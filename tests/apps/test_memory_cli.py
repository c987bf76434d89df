#!/usr/bin/env python3
"""The memory levers of issue 13 end to end on the cpu backend (standard
library only; see README "Fitting bigger models").

- LeverTest: 20 steps of the tiny Llama and GPT-2 fixtures (dropout 0.1,
  clipping, masked data) with each lever alone and all together give the
  plain run's loss curve: --recompute bit for bit, --loss-chunk and
  --fused-optimizer within 1e-6 relative (their sums run in another order).
  With --dtype bf16-mixed the fused head and loss run in the compute dtype
  (bf16 inputs, as the unfused head's matmul) and track the unchunked mixed
  run within 1e-2; recompute stays bit for bit.
- PlanTest: the memory plan is printed before step 0, and summary.txt holds
  it beside the peak the cpu backend measured (its allocator counter):
  within 10% for every lever.
- RefuseTest: the llama-7b preset with no levers on --memory-limit 24GiB is
  refused before anything is allocated, naming parameters, optimizer state,
  gradients and activations and the levers; compile --plan-only gives the
  plan of llama-7b and llama-1b steps in seconds; bad sizes are usage errors.
- BackendTest: --offload optimizer is refused by the cpu backend (its memory
  is host memory) and the dataflow device; dataflow refuses --recompute and
  --fused-optimizer (its static schedule would undo them) and runs
  --loss-chunk and Adafactor bit-identically to cpu; opencl refuses the
  fused loss, Adafactor and the fused optimizer (no kernels), by op name.
- OptionsTest: lever and Adafactor options that cannot act are refused.
- AdafactorTest: Adafactor checkpoints resume bit for bit; bf16 parameters
  keep f32 Adafactor/AdamW state and train.
"""
import json
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_util  # noqa: E402


def steps(out):
    """[(loss, grad_norm)] per step from metrics.jsonl."""
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [(x["loss"], x["grad_norm"]) for x in rows if "loss" in x]


def mfus(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [x["mfu"] for x in map(json.loads, f) if "mfu" in x]


def summary(out):
    with open(os.path.join(out, "summary.txt")) as f:
        return f.read()


class Base(cli_util.FixtureTrainTest):
    """Short fixture runs (cli_util.FixtureTrainTest)."""


LEVERS = {
    "recompute-layer": (["--recompute", "layer"], 0.0),
    "recompute-attention": (["--recompute", "attention"], 0.0),
    "loss-chunk": (["--loss-chunk", "5"], 1e-6),
    "fused-optimizer": (["--fused-optimizer"], 1e-6),
    "all": (["--recompute", "layer", "--loss-chunk", "5", "--fused-optimizer"], 1e-6),
}


class LeverTest(Base):
    def check(self, family):
        self.train(family, "plain")
        plain = steps(self.path("plain"))
        self.assertEqual(len(plain), 20)
        # The run trained: the loss moved.
        self.assertGreater(max(x[0] for x in plain) - min(x[0] for x in plain), 0.05)
        for name, (args, bound) in LEVERS.items():
            with self.subTest(family=family, lever=name):
                self.train(family, name, *args)
                got = steps(self.path(name))
                self.assertEqual(len(got), 20)
                worst = max(abs(a[0] - b[0]) / abs(b[0]) for a, b in zip(got, plain))
                if bound == 0.0:
                    self.assertEqual(got, plain)  # bit for bit, gradient norms too
                else:
                    self.assertLessEqual(worst, bound, (name, got[:3], plain[:3]))
                    worst_norm = max(abs(a[1] - b[1]) / abs(b[1]) for a, b in zip(got, plain))
                    self.assertLessEqual(worst_norm, 1e-5, name)
                print("%s %s: worst relative loss gap %.2e" % (family, name, worst),
                      file=sys.stderr)

    def test_llama(self):
        self.check("llama")

    def test_gpt2(self):
        self.check("gpt2")

    def test_bf16_mixed(self):
        mixed = ["--dtype", "bf16-mixed"]
        self.train("llama", "mixed", *mixed)
        plain = steps(self.path("mixed"))
        self.assertLess(plain[-1][0], plain[0][0])
        # No MFU against the f32 peak for bf16 matmuls (an H100 read 418%);
        # f32 runs have one.
        self.assertEqual(set(mfus(self.path("mixed"))), {0})
        self.train("llama", "f32", steps_=2)
        self.assertTrue(all(m > 0 for m in mfus(self.path("f32"))), mfus(self.path("f32")))
        self.train("llama", "mixed-recompute", *mixed, "--recompute", "layer")
        self.assertEqual(steps(self.path("mixed-recompute")), plain)
        dump = self.path("graph")
        for name, args in (("mixed-chunk", ["--loss-chunk", "5", "--dump-graph", dump]),
                           ("mixed-all", ["--recompute", "layer", "--loss-chunk", "5",
                                          "--fused-optimizer"])):
            self.train("llama", name, *mixed, *args)
            got = steps(self.path(name))
            worst = max(abs(a[0] - b[0]) / abs(b[0]) for a, b in zip(got, plain))
            # The unfused head rounds the logits to bf16; the fused op keeps them f32.
            self.assertLessEqual(worst, 1e-2, (name, got[:3], plain[:3]))
            print("llama bf16-mixed %s: worst relative loss gap %.2e" % (name, worst),
                  file=sys.stderr)
        # The fused op's h and weight are bf16 casts of the f32 values.
        with open(dump + ".txt") as f:
            lines = {m.group(1): line for line in f
                     for m in [re.match(r"^(%\d+)(?:, %\d+)* = ", line)] if m}
        fused = [l for l in lines.values() if " = linear_cross_entropy(" in l]
        self.assertEqual(len(fused), 1, fused)
        h, w = re.search(r"linear_cross_entropy\((%\d+), (%\d+), ", fused[0]).groups()
        for value in (h, w):
            self.assertRegex(lines[value], r'= cast\(%\d+\) dtype="bf16" : bf16\[')


class PlanTest(Base):
    def test_plan_before_step_0_and_measured_peak_within_10_percent(self):
        for name, args in [("plain", []), ("recompute", ["--recompute", "layer"]),
                           ("chunk", ["--loss-chunk", "5"]), ("fused", ["--fused-optimizer"]),
                           ("adafactor", ["--optimizer", "adafactor"]),
                           ("accum", ["--grad-accum", "2"])]:
            with self.subTest(lever=name):
                r = self.train("llama", name, *args, steps_=3)
                plan_at = r.stderr.index("memory plan (device bytes, before step 0")
                self.assertLess(plan_at, r.stderr.index("resolved configuration"))
                for item in ("parameters", "gradients", "optimizer state", "activations",
                             "workspace", "peak"):
                    self.assertRegex(r.stderr[plan_at:], r"\n  %s +\S+" % item)
                text = summary(self.path(name))
                m = re.search(r"\n  peak +\S+ \S+ \((\d+) bytes\)", text)
                planned = int(m.group(1))
                m = re.search(r"measured peak device memory: \S+ \S+ \((\d+) bytes; plan "
                              r"([-+][0-9.]+)%\); measured by the backend: allocator counter",
                              text)
                self.assertIsNotNone(m, text)
                measured = int(m.group(1))
                self.assertLessEqual(abs(planned - measured) / measured, 0.10, text)
                print("%s: plan %d, measured %d bytes" % (name, planned, measured),
                      file=sys.stderr)

    def test_levers_shrink_the_plan(self):
        """Where activations dominate (gpt2-124m, 4 x 512 tokens), recompute and
        the chunked loss shrink the planned peak; where the weights do
        (llama-7b, 128 tokens), the fused optimizer removes the gradients,
        Adafactor the optimizer state and bf16 half the parameters."""
        def plan(preset, vocab, seq, batch, *args):
            r = self.ty("compile", "--plan-only", "--backend", "cpu", "--preset", preset,
                        "--vocab-size", vocab, "--seq-len", seq, "--batch-size", batch,
                        "--memory-limit", "1T", *args)
            return {k: int(v) for k, v in re.findall(r"\n  (\w[\w ]*?) +\S+ \S+ \((\d+) bytes\)",
                                                     "\n" + r.stdout)}
        small = ("gpt2-124m", "50257", "512", "4")
        plain = plan(*small)
        self.assertLess(plan(*small, "--recompute", "layer")["peak"], 0.8 * plain["peak"])
        self.assertLess(plan(*small, "--loss-chunk", "256")["peak"], plain["peak"])
        big = ("llama-7b", "32000", "128", "1")
        plain = plan(*big)
        self.assertGreaterEqual(plain["gradients"], 2 * plain["parameters"])  # g, clipped g
        fused = plan(*big, "--fused-optimizer", "--clip", "0")
        self.assertLess(fused["gradients"], plain["parameters"] / 20, (fused, plain))
        self.assertLess(fused["peak"], plain["peak"] - 1.5 * plain["parameters"])
        adafactor = plan(*big, "--optimizer", "adafactor")
        self.assertLess(adafactor["optimizer state"], plain["optimizer state"] / 100)
        bf16 = plan(*big, "--dtype", "bf16")
        self.assertEqual(bf16["parameters"] * 2, plain["parameters"])
        self.assertEqual(bf16["optimizer state"], plain["optimizer state"])


class RefuseTest(Base):
    def test_train_plan_only(self):
        # train --plan-only builds the run's graphs, prints the plan, checks
        # it and exits: 0 when it fits, 1 when it does not, and --out is
        # never created; a resumed run is refused by name (usage, 2)
        data = cli_util.make_ids_dataset(self.path("ids"))
        out = self.path("planned")
        args = ["train", "--preset", "llama-1b", "--data", data, "--out", out,
                "--batch-size", "1", "--recompute", "layer", "--plan-only", "--cache-dir", "none"]
        r = self.ty(*args, "--memory-limit", "40GiB")
        self.assertIn("memory plan (device bytes, before step 0; limit 40 GiB", r.stderr)
        self.assertIn("train step graph:", r.stderr)
        self.assertIn("--plan-only: the plan of the run fits --memory-limit 40GiB; nothing was "
                      "allocated or written", r.stderr)
        self.assertNotIn("Step [", r.stderr)
        self.assertFalse(os.path.exists(out))
        r = self.ty(*args, "--memory-limit", "4GiB", rc=1)
        self.assertIn("more than --memory-limit 4GiB (4 GiB); nothing was allocated", r.stderr)
        self.assertFalse(os.path.exists(out))
        self.assertIn("evaluation graph:", r.stderr)
        # data without validation rows: no evaluation graph (nor its arena)
        bare = cli_util.make_ids_dataset(self.path("bare"), val_fraction="0")
        r = self.ty(*(a if a != data else bare for a in args), "--memory-limit", "40GiB")
        self.assertIn("train step graph:", r.stderr)
        self.assertNotIn("evaluation graph:", r.stderr)
        r = self.ty(*args, "--resume", "latest", rc=2)
        self.assertIn("--plan-only plans a fresh run (the same graphs as a resumed one); drop "
                      "--resume latest", r.stderr)
        r = self.ty(*args, "--artifact", self.path("step.tyart"), rc=2)
        self.assertIn("--plan-only builds the graphs the run would compile; --artifact", r.stderr)

    def test_7b_without_levers_is_refused_on_24_gib(self):
        data = cli_util.make_ids_dataset(self.path("ids"))
        out = self.path("7b")
        r = self.ty("train", "--preset", "llama-7b", "--data", data, "--out", out,
                    "--batch-size", "1", "--memory-limit", "24GiB", "--cache-dir", "none", rc=1)
        err = r.stderr
        self.assertIn("does not fit", err)
        self.assertIn("more than --memory-limit 24GiB (24 GiB)", err)
        self.assertIn("nothing was allocated", err)
        for item, lever in (("parameters", "--dtype bf16"),
                            ("optimizer state", "--optimizer adafactor"),
                            ("gradients", "--fused-optimizer"),
                            ("activations", "--recompute layer")):
            self.assertRegex(err, r"; %s [0-9.]+ [KMG]i?B \([^)]*%s" % (item, lever))
        # refused before the run folder is touched: the folder it would have
        # made is not left behind
        self.assertFalse(os.path.exists(out))
        self.assertNotIn("measured peak", err)

    def test_plan_only_of_large_presets(self):
        r = self.ty("compile", "--plan-only", "--backend", "cpu", "--preset", "llama-7b",
                    "--vocab-size", "32000", "--seq-len", "2048", "--batch-size", "1",
                    "--memory-limit", "24GiB", rc=1)
        self.assertIn("does not fit", r.stderr)
        r = self.ty("compile", "--plan-only", "--backend", "cpu", "--preset", "llama-7b",
                    "--vocab-size", "32000", "--seq-len", "2048", "--batch-size", "1",
                    "--memory-limit", "24GiB", "--recompute", "layer", "--loss-chunk", "1024",
                    "--optimizer", "adafactor", "--fused-optimizer", "--dtype", "bf16")
        self.assertIn("memory plan (device bytes; limit 24 GiB", r.stdout)
        peak = int(re.search(r"\n  peak +\S+ \S+ \((\d+) bytes\)", r.stdout).group(1))
        self.assertLess(peak, 24 << 30)
        for t in ("32768", "131072"):
            r = self.ty("compile", "--plan-only", "--backend", "cpu", "--preset", "llama-1b",
                        "--vocab-size", "128256", "--seq-len", t, "--batch-size", "1",
                        "--recompute", "layer", "--loss-chunk", "4096", "--optimizer",
                        "adafactor", "--fused-optimizer", "--dtype", "bf16", "--memory-limit",
                        "80GiB")
            self.assertIn("train step graph", r.stdout)
        # llama-8b is Llama-3.1-8B's shape: its 8,030,261,248 parameters in
        # f32 (GQA 32/8, MLP 14336, an untied head of 128256 rows)
        r = self.ty("compile", "--plan-only", "--backend", "cpu", "--preset", "llama-8b",
                    "--vocab-size", "128256", "--seq-len", "4096", "--batch-size", "1",
                    "--recompute", "layer", "--memory-limit", "1TiB")
        self.assertIn("parameters             29.92 GiB (32121044992 bytes)", r.stdout)

    def test_bad_limits(self):
        data = cli_util.make_ids_dataset(self.path("ids"))
        for bad in ("lots", "-1G", "12Q", "0"):
            r = self.ty("train", "--model", os.path.join(cli_util.CFG.models, "llama"), "--data",
                        data, "--out", self.path("x"), "--memory-limit", bad, rc=2)
            self.assertIn("--memory-limit '%s' is not a size" % bad, r.stderr)
        r = self.ty("train", "--model", os.path.join(cli_util.CFG.models, "llama"), "--data",
                    data, "--out", self.path("x"), "--memory-limit", "64KiB", "--cache-dir",
                    "none", rc=1)
        self.assertIn("more than --memory-limit 64KiB (64 KiB)", r.stderr)

    def test_weights_message_names_the_runs_dtype(self):
        """Issue 33: weights that fit in no dtype are refused before any graph,
        and the message names the run's own parameter dtype (f32 under
        bf16-mixed), not bf16's 2 bytes of the bound."""
        data = cli_util.make_ids_dataset(self.path("ids"))
        base = ["train", "--model", os.path.join(cli_util.CFG.models, "llama"), "--data", data,
                "--out", self.path("x"), "--memory-limit", "1KiB", "--cache-dir", "none"]
        for dtype, named in (("f32", "4 bytes each: f32 weights"),
                             ("bf16-mixed", "4 bytes each: f32 weights"),
                             ("f64", "8 bytes each: f64 weights")):
            with self.subTest(dtype=dtype):
                r = self.ty(*(base + ["--dtype", dtype]), rc=1)
                self.assertIn(named, r.stderr)
                self.assertIn("not even bf16 weights (2 bytes each) would fit", r.stderr)
                self.assertNotIn("bf16 weights)", r.stderr)
        r = self.ty(*(base + ["--dtype", "bf16"]), rc=1)
        self.assertIn("2 bytes each: bf16 weights", r.stderr)
        self.assertNotIn("not even", r.stderr)


class BackendTest(Base):
    def test_cpu_refuses_offload(self):
        r = self.train("llama", "off", "--offload", "optimizer", rc=1, steps_=2)
        self.assertIn("is flagged to live in host memory (--offload optimizer), but this "
                      "device's memory is host memory already", r.stderr)

    def test_dataflow(self):
        for args, why in ((["--recompute", "layer"], "recompute=layer is refused"),
                          (["--fused-optimizer"], "fused_optimizer=1 is refused"),
                          (["--offload", "optimizer"], "offload=optimizer is refused")):
            r = self.train("gpt2", "df", "--backend", "dataflow", *args, rc=1, steps_=2)
            self.assertIn("dataflow: memory lever " + why, r.stderr)
        for name, args in (("chunk", ["--loss-chunk", "5"]),
                           ("adafactor", ["--optimizer", "adafactor"])):
            self.train("gpt2", "cpu-" + name, *args, steps_=5)
            self.train("gpt2", "df-" + name, "--backend", "dataflow", *args, steps_=5)
            self.assertEqual(steps(self.path("df-" + name)), steps(self.path("cpu-" + name)))
        r = self.ty("compile", "--backend", "dataflow", "--model",
                    os.path.join(cli_util.CFG.models, "gpt2"), "--batch-size", "8",
                    "--seq-len", "16", "--loss-chunk", "5", "--optimizer", "adafactor", "--out",
                    self.path("step.tyart"), "--cache-dir", "none")
        self.assertIn("memory levers: loss_chunk=5 optimizer=adafactor", r.stdout)
        self.assertIn("memory plan (device bytes", r.stdout)

    def test_opencl(self):
        devices = json.loads(self.ty("devices", "--json").stdout)
        opencl = [b for b in devices["backends"] if b["name"] == "opencl" and b["devices"]]
        if not opencl:
            self.skipTest("no usable OpenCL device")
        for args, op in ((["--loss-chunk", "5"], "linear_cross_entropy"),
                         (["--optimizer", "adafactor"], "adafactor_update"),
                         (["--fused-optimizer"], "global_norm_scale")):
            r = self.train("gpt2", "ocl", "--backend", "opencl:0", *args, rc=1, steps_=2)
            self.assertIn("opencl has no kernel for op '%s'" % op, r.stderr)
        r = self.train("gpt2", "ocl", "--backend", "opencl:0", "--offload", "optimizer", rc=1,
                       steps_=2)
        self.assertIn("which the opencl backend does not implement yet", r.stderr)


class OptionsTest(Base):
    def test_refusals(self):
        data = cli_util.make_ids_dataset(self.path("ids"))
        base = ["train", "--model", os.path.join(cli_util.CFG.models, "llama"), "--data", data,
                "--out", self.path("x")]
        cases = [
            (["--fused-optimizer", "--grad-accum", "2"], "--fused-optimizer needs --grad-accum 1"),
            (["--recompute", "all"], "--recompute must be none, attention or layer"),
            (["--offload", "params"], "--offload must be none or optimizer"),
            (["--loss-chunk", "-1"], "--loss-chunk must be >= 0"),
            (["--optimizer", "adafactor", "--beta2", "0.9"], "--beta2 has no effect"),
            (["--optimizer", "adafactor", "--relative-step", "--lr", "1e-3"],
             "--lr has no effect with --relative-step"),
            (["--optimizer", "adafactor", "--warmup-init"], "--warmup-init needs --relative-step"),
            (["--clip-threshold", "2"], "--clip-threshold has no effect with --optimizer adamw"),
            (["--optimizer", "adafactor", "--decay-rate", "0.5"], "--decay-rate must be < 0"),
        ]
        for args, why in cases:
            with self.subTest(args=args):
                r = self.ty(*(base + args), rc=2)
                self.assertIn(why, r.stderr)


class AdafactorTest(Base):
    def test_resume_is_bit_identical(self):
        args = ["--optimizer", "adafactor", "--beta1", "0.9", "--decay-all", "--weight-decay",
                "0.01", "--schedule", "constant"]
        self.train("llama", "straight", *args, steps_=6)
        self.train("llama", "resumed", *args, "--save-every", "3", steps_=3)
        self.train("llama", "resumed", *args, "--resume", "latest", steps_=6)
        self.assertEqual(steps(self.path("resumed")), steps(self.path("straight")))
        with open(os.path.join(self.path("straight"), "checkpoint-6", "optimizer.safetensors"),
                  "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        # down_proj.weight is [hidden, intermediate]: factored into its rows and columns
        row = header["model.layers.0.mlp.down_proj.weight.exp_avg_sq_row"]["shape"]
        col = header["model.layers.0.mlp.down_proj.weight.exp_avg_sq_col"]["shape"]
        self.assertEqual(len(row), 1)
        self.assertEqual(len(col), 1)
        self.assertNotIn("model.layers.0.mlp.down_proj.weight.exp_avg_sq", header)
        self.assertIn("model.norm.weight.exp_avg_sq", header)
        self.assertIn("model.norm.weight.exp_avg", header)

    def test_bf16_parameters_keep_f32_state(self):
        """--dtype bf16 keeps f32 optimizer state (no stochastic rounding), alone and
        with every other lever."""
        levers = ["--recompute", "layer", "--loss-chunk", "5", "--fused-optimizer"]
        for opt, extra in (("adamw", []), ("adafactor", []), ("adafactor", levers)):
            with self.subTest(optimizer=opt, levers=bool(extra)):
                self.train("llama", "bf16-" + opt, "--dtype", "bf16", "--optimizer", opt,
                           *extra, steps_=10)
                losses = [x[0] for x in steps(self.path("bf16-" + opt))]
                self.assertLess(losses[-1], losses[0])
                with open(os.path.join(self.path("bf16-" + opt), "checkpoint-10",
                                       "optimizer.safetensors"), "rb") as f:
                    header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
                self.assertEqual({v["dtype"] for k, v in header.items() if k != "__metadata__"},
                                 {"F32"})
                self.rm(self.path("bf16-" + opt))

    def rm(self, path):
        import shutil
        shutil.rmtree(path)


if __name__ == "__main__":
    sys.exit(cli_util.main("--models"))
