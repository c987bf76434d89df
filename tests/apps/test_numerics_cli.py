#!/usr/bin/env python3
"""`--check-numerics` (issue 34): the first node whose output holds a NaN or an
infinity is named, forward or backward, with its layer and its inputs'
figures, by `forward`, `generate` and `train`; the sampled mode checks steps 1, N+1, ...
and replays a non-finite step between them checked. Python standard library
only.

usage: test_numerics_cli.py --trainyard EXE --models DIR [unittest args]

The fixtures: copies of the tiny GPT-2 and Llama models with one f32 tensor
multiplied by a factor. x1e38 on layer 1's first MLP weight overflows its
matmul in the forward; x1e30 on it keeps the forward finite (the MLP's
output is normalized away) but its GELU's backward meets 1e30-sized inputs
and a 1e-32-sized gradient and makes NaN: a non-finite gradient born in the
backward.
"""
import array
import json
import os
import re
import shutil
import struct
import sys
import unittest

import cli_util  # noqa: E402  (beside this file)
from cli_util import make_ids_dataset, run  # noqa: E402

GPT2_FC1 = "transformer.h.1.mlp.c_fc.weight"
LLAMA_UP1 = "model.layers.1.mlp.up_proj.weight"


def scaled_model(dst, family, tensor, factor):
    """A copy of fixture `family` with f32 `tensor` multiplied by `factor`."""
    src = os.path.join(cli_util.CFG.models, family)
    os.makedirs(dst)
    shutil.copy(os.path.join(src, "config.json"), dst)
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = bytearray(data[8 + n:])
    entry = header[tensor]
    assert entry["dtype"] == "F32", entry
    a, b = entry["data_offsets"]
    values = array.array("f")
    values.frombytes(bytes(body[a:b]))
    body[a:b] = array.array("f", [x * factor for x in values]).tobytes()
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(data[:8 + n] + bytes(body))
    return dst


def losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [(r["step"], r["loss"], r["grad_norm"]) for r in rows if "loss" in r]


class Base(cli_util.TempDirTest):
    def tokens(self):
        return cli_util.write(self.path("tokens.json"),
                              "[[1,2,3,4,5,6,7,8],[9,10,11,12,13,14,15,16]]")

    def forward(self, model, *extra):
        return run(["forward", "--model", model, "--tokens", self.tokens(), "--out",
                    self.path("out.safetensors")] + list(extra))

    def data(self):
        if not os.path.isdir(self.path("data")):
            make_ids_dataset(self.path("data"), val_fraction=None)
        return self.path("data")

    def train(self, model, out, *extra):
        return run(["train", "--model", model, "--data", self.data(), "--out", self.path(out),
                    "--batch-size", "2", "--cache-dir", "none"] + list(extra))

    def assert_names(self, r, op, part, layer_text, *more):
        """The report of a run that stopped at the first non-finite node."""
        self.assertEqual(r.returncode, 1, r.stderr)
        first = re.search(r"the first non-finite value is the output of node (\d+) of (\d+), "
                          r"(\w+) \((forward|backward)\)", r.stderr)
        self.assertIsNotNone(first, r.stderr)
        self.assertEqual((first.group(3), first.group(4)), (op, part), r.stderr)
        self.assertIn("in " + layer_text, r.stderr)
        # every input with its figures: shape, min, max, NaN and Inf counts
        inputs = re.findall(r"  input (\d+) (\S+) (f32 \[[\d,]*\]) \(([^)]*)\): min (\S+) "
                            r"max (\S+), (\d+) NaN, (\d+) Inf", r.stderr)
        self.assertGreaterEqual(len(inputs), 2, r.stderr)
        for text in more:
            self.assertIn(text, r.stderr)
        self.assertIn("ABORTED", r.stderr)
        return inputs


class ForwardTest(Base):
    def test_forward_overflow_is_named(self):
        model = scaled_model(self.path("m"), "gpt2", GPT2_FC1, 1e38)
        r = self.forward(model, "--check-numerics")
        inputs = self.assert_names(r, "matmul", "forward", "layer 1 (transformer.h.1) MLP")
        # its inputs are finite: the activation of normal size, the weight huge
        names = {i[1]: i for i in inputs}
        self.assertIn(GPT2_FC1, names, r.stderr)
        w = names[GPT2_FC1]
        self.assertEqual(w[2], "f32 [32,128]")
        self.assertGreater(float(w[5]), 1e36)
        self.assertEqual((w[6], w[7]), ("0", "0"))
        self.assertFalse(os.path.exists(self.path("out.safetensors")), "nothing is written")

    def test_llama_forward_overflow_is_named(self):
        model = scaled_model(self.path("m"), "llama", LLAMA_UP1, 1e38)
        r = self.forward(model, "--check-numerics")
        self.assert_names(r, "matmul", "forward", "layer 1 (model.layers.1) MLP", LLAMA_UP1)

    def test_backward_overflow_is_named(self):
        model = scaled_model(self.path("m"), "gpt2", GPT2_FC1, 1e30)
        # the forward alone is finite...
        r = self.forward(model, "--check-numerics")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("every output of the", r.stderr)
        # ...the backward is not: the first NaN is born in the GELU's backward
        r = self.forward(model, "--check-numerics", "--grads")
        self.assert_names(r, "gelu_backward", "backward",
                          "layer 1 (transformer.h.1) MLP (the backward of its nodes)")

    def test_clean_model_writes_the_same_outputs(self):
        model = os.path.join(cli_util.CFG.models, "gpt2")
        r = self.forward(model, "--grads")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.path("out.safetensors"), "rb") as f:
            plain = f.read()
        os.unlink(self.path("out.safetensors"))
        r = self.forward(model, "--grads", "--check-numerics")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("check-numerics: every output of the", r.stderr)
        with open(self.path("out.safetensors"), "rb") as f:
            self.assertEqual(f.read(), plain)

    def test_malformed_values_are_refused(self):
        model = os.path.join(cli_util.CFG.models, "gpt2")
        for value, text in (("every:0", "--check-numerics=every:0"),
                            ("foo", "--check-numerics=foo"),
                            ("every:", "--check-numerics=every:"),
                            ("every:3x", "--check-numerics=every:3x")):
            r = self.forward(model, "--check-numerics=" + value)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(text + ": expected no value", r.stderr)
            self.assertIn("every:N with N >= 1", r.stderr)


class GenerateTest(Base):
    def generate(self, model, *extra):
        return run(["generate", "--model", model, "--max-new-tokens", "3"] + list(extra))

    def test_prompt_overflow_is_named(self):
        model = scaled_model(self.path("m"), "gpt2", GPT2_FC1, 1e38)
        r = self.generate(model, "--prompt-ids", "1,2,3", "--check-numerics")
        self.assert_names(r, "matmul", "forward", "layer 1 (transformer.h.1) MLP", GPT2_FC1)
        self.assertEqual(r.stdout, "")

    def test_batch_overflow_is_named(self):
        model = scaled_model(self.path("m"), "llama", LLAMA_UP1, 3e38)
        prompts = cli_util.write(self.path("p.jsonl"), '{"prompt_ids": [1, 2, 3]}\n')
        r = self.generate(model, "--input", prompts, "--output", self.path("o.jsonl"),
                          "--check-numerics")
        self.assert_names(r, "matmul", "forward", "layer 1 (model.layers.1) MLP", LLAMA_UP1)
        self.assertFalse(os.path.exists(self.path("o.jsonl")))

    def test_clean_model_generates_the_same_tokens(self):
        model = os.path.join(cli_util.CFG.models, "gpt2")
        plain = self.generate(model, "--prompt-ids", "1,2,3", "--json")
        checked = self.generate(model, "--prompt-ids", "1,2,3", "--json", "--check-numerics")
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertEqual(checked.returncode, 0, checked.stderr)
        self.assertEqual(checked.stdout, plain.stdout)

    def test_malformed_values_are_refused(self):
        model = os.path.join(cli_util.CFG.models, "gpt2")
        r = self.generate(model, "--prompt-ids", "1,2,3", "--check-numerics=every:0")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--check-numerics=every:0: expected no value", r.stderr)


class TrainTest(Base):
    def test_forward_overflow_is_named_before_a_checkpoint(self):
        model = scaled_model(self.path("m"), "gpt2", GPT2_FC1, 1e38)
        r = self.train(model, "run", "--max-steps", "3", "--check-numerics")
        self.assert_names(r, "matmul", "forward", "layer 1 (transformer.h.1) MLP",
                          "step 1: the first non-finite value", GPT2_FC1,
                          "stopping without saving a checkpoint")
        self.assertEqual([n for n in os.listdir(self.path("run")) if "checkpoint" in n], [])

    def test_backward_overflow_is_named(self):
        model = scaled_model(self.path("m"), "gpt2", GPT2_FC1, 1e30)
        r = self.train(model, "run", "--max-steps", "3", "--check-numerics")
        self.assert_names(r, "gelu_backward", "backward",
                          "layer 1 (transformer.h.1) MLP (the backward of its nodes)")

    def test_previous_checkpoint_stays_whole(self):
        # a learning rate of 1e30 makes step 2's weights overflow
        model = os.path.join(cli_util.CFG.models, "gpt2")
        r = self.train(model, "ref", "--max-steps", "1", "--lr", "1e30", "--schedule", "constant")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.train(model, "run", "--max-steps", "4", "--lr", "1e30", "--schedule",
                       "constant", "--save-every", "1", "--check-numerics")
        self.assert_names(r, "matmul", "forward", "layer 0 (transformer.h.0) attention",
                          "step 2: the first non-finite value")
        saved = sorted(n for n in os.listdir(self.path("run")) if n.startswith("checkpoint-"))
        self.assertEqual(saved, ["checkpoint-1"])
        for name in ("model.safetensors", "optimizer.safetensors"):
            self.assertEqual(cli_util.checkpoint_bytes(self.path("ref", "checkpoint-1", name)),
                             cli_util.checkpoint_bytes(self.path("run", "checkpoint-1", name)),
                             name)

    def test_malformed_values_are_refused_before_anything_runs(self):
        model = os.path.join(cli_util.CFG.models, "gpt2")
        for value in ("every:0", "foo", "every:-2"):
            r = self.train(model, "run", "--max-steps", "1", "--check-numerics=" + value)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("--check-numerics=%s: expected no value" % value, r.stderr)
            self.assertFalse(os.path.exists(self.path("run")), r.stderr)

    def test_refused_with_grad_accum(self):
        model = os.path.join(cli_util.CFG.models, "gpt2")
        r = self.train(model, "run", "--max-steps", "1", "--grad-accum", "2",
                       "--check-numerics=every:2")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--check-numerics checks the fused train step of one process: give "
                      "--grad-accum 1", r.stderr)
        self.assertFalse(os.path.exists(self.path("run")), r.stderr)


class SampledTest(Base):
    def test_checks_steps_1_4_7_and_changes_no_loss(self):
        model = os.path.join(cli_util.CFG.models, "gpt2")
        r = self.train(model, "plain", "--max-steps", "8")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("check-numerics", r.stderr)
        r = self.train(model, "every3", "--max-steps", "8", "--check-numerics=every:3")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("steps 1, 4, 7, ... (every 3)", r.stderr)
        checked = [int(s) for s in re.findall(r"check-numerics: step (\d+) checked", r.stderr)]
        self.assertEqual(checked, [1, 4, 7])
        self.assertEqual(len(re.findall(r"check-numerics: cost: a checked step takes \S+ s "
                                        r"\(its read-back and its copy of the state included\), "
                                        r"a plain one \S+ s \(\S+x\)", r.stderr)), 1, r.stderr)
        r = self.train(model, "every1", "--max-steps", "8", "--check-numerics")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("every step runs with its", r.stderr)
        # the checked steps compute the same bits as plain ones
        self.assertEqual(losses(self.path("every3")), losses(self.path("plain")))
        self.assertEqual(losses(self.path("every1")), losses(self.path("plain")))
        self.assertEqual(len(losses(self.path("plain"))), 8)

    def test_nan_between_checked_steps_is_replayed_and_named(self):
        model = os.path.join(cli_util.CFG.models, "gpt2")
        r = self.train(model, "run", "--max-steps", "6", "--lr", "1e30", "--schedule",
                       "constant", "--check-numerics=every:3")
        self.assertIn("step 2 was not checked; running steps 1 to 2 again", r.stderr)
        self.assert_names(r, "matmul", "forward", "layer 0 (transformer.h.0) attention",
                          "step 2: the first non-finite value",
                          "step 2: the loss is")
        self.assertEqual([n for n in os.listdir(self.path("run")) if "checkpoint" in n], [])


if __name__ == "__main__":
    sys.exit(cli_util.main("--models"))
