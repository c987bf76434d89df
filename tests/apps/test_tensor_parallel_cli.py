#!/usr/bin/env python3
"""End-to-end tests of tensor-parallel `trainyard train --tp N` under Open
MPI's mpirun on the cpu backend (issue 17; Python standard library only).

- MatchTest: --tp 2 on 2 ranks trains the tiny Llama (GQA: 4 q heads, 2 kv
  heads) and the tiny GPT-2 (with dropout 0.1) for 20 steps with the same global batch as one
  process: per-step loss within 1e-5 relative, final weights within 1e-5
  (GPT-2's key bias, whose gradient is zero in exact arithmetic and so pure
  rounding that Adam scales up, is compared on its q and v thirds only);
  the rank layout is printed before step 0; the checkpoint is an unchanged
  Hugging Face model (full shapes) that `trainyard forward` loads. The
  template backend (the SDK's host executor) follows the same curve.
  --tp 2 with --mlp-chunk 5 and --recompute layer follows one process
  without them (issue 31).
- DataParallelTest: --tp 2 with 2 replicas (4 ranks) equals one process.
- ZeroTest: --tp 2 --zero 1 on 4 ranks (dp 2 x tp 2; ZeRO-1 over each tp
  index's dp group) on the tiny Llama and GPT-2: per-step loss and gradient
  norm (clipping on) within 1e-5 of one process, the layout line says
  ZeRO-1; the checkpoint holds one optimizer shard per replica of whole
  tensors (one process's state), and resumes as one process without
  --zero on the same curve.
- DeviceGroupsTest: the same on a backend with collectives (commfake): the
  device communicators of the tp and dp groups (ABI 1.7), with and without
  ZeRO-1 (its parameter broadcast on the dp group's communicator).
- ResumeTest: a tp 2 checkpoint resumed at tp 1, and a tp 1 one resumed at
  tp 2, continue the uninterrupted curve (optimizer state re-split).
- VocabTest: a vocabulary of 97 over --tp 2 (the last rank's part padded)
  trains like one process and resumes tp 2 -> 1 and 1 -> 2; the checkpoint
  holds the 97 real rows.
- RefuseTest: bad inputs: --tp not dividing the world, the heads or the
  MLP; --tp in one process; --tp with --fused-optimizer, --optimizer
  adafactor, --sample-tokens, --distributed none, --loss-chunk; --zero 1
  with one replica (with or without --pp); a backend
  without the tensor-parallel ops (opencl) and a whole-step device
  (dataflow).

Without mpirun or the MPI shim the suite exits 77 (skipped) and says why.
"""
import argparse
import json
import os
import struct
import sys

import cli_util
import test_distributed_cli as dist

CFG = None


class Base(dist.SplitModelBase):
    pass


class MatchTest(Base):
    def check_model(self, model, batch=("--batch-size", "4")):
        self.use(model)
        steps = ["--max-steps", "20", "--schedule", "constant"] + list(batch)
        one, two = self.path("one"), self.path("two")
        self.train(*steps, "--out", one)
        r = self.train_mpi(2, *steps, "--out", two, "--tp", "2")
        # the layout, before step 0, from rank 0 alone
        self.assertEqual(r.stderr.count("tensor parallel: 2 ranks = dp 1 x pp 1 x tp 2"), 1,
                         r.stderr)
        self.assertIn("rank 0: dp 0, pp 0, tp 0, device cpu", r.stderr)
        self.assertIn("rank 1: dp 0, pp 0, tp 1, device cpu", r.stderr)
        self.assertLess(r.stderr.index("rank 1: dp 0"), r.stderr.index("resolved configuration"))
        self.assertIn("per rank (2 ranks, dp 1 x tp 2; rank 0's part", r.stderr)
        l1, l2 = dist.losses(one), dist.losses(two)
        self.assertEqual(sorted(l2), list(range(1, 21)))
        self.assert_curves_match(l1, l2, range(1, 21), rel=1e-5)
        self.assert_weights_close(os.path.join(one, "checkpoint-20"),
                                  os.path.join(two, "checkpoint-20"))
        # an unchanged Hugging Face model: `forward` loads it
        tokens = self.path("tokens.json")
        with open(tokens, "w") as fp:
            json.dump([[1, 2, 3, 4, 5]], fp)
        outs = []
        for run_dir in (one, two):
            out = self.path(os.path.basename(run_dir) + ".forward.safetensors")
            f = dist.run(["forward", "--model", os.path.join(run_dir, "checkpoint-20"),
                          "--tokens", tokens, "--out", out])
            self.assertEqual(f.returncode, 0, f.stderr[-2000:])
            outs.append(dist.read_f32_safetensors(out))
        self.assertLessEqual(abs(outs[0]["loss"][0] - outs[1]["loss"][0]),
                             1e-5 * abs(outs[0]["loss"][0]))
        with open(os.path.join(two, "checkpoint-20", "trainer_state.json")) as fp:
            self.assertEqual(json.load(fp)["world_size"], 2)

    def test_llama_gqa(self):
        self.check_model(self.llama)

    def test_gpt2(self):
        # with dropout: the masks (Philox, on replicated tensors) are the
        # same for any split
        self.check_model(self.gpt2, ("--batch-size", "4", "--dropout", "0.1"))


    def test_mlp_chunk(self):
        # --mlp-chunk 5: each piece's row-parallel projection sums over tp
        # (issue 31); one process without it gives the curve
        self.use(self.llama)
        steps = ["--max-steps", "10", "--schedule", "constant", "--batch-size", "4",
                 "--recompute", "layer"]
        one, two = self.path("one"), self.path("two")
        self.train(*steps, "--out", one)
        self.train_mpi(2, *steps, "--out", two, "--tp", "2", "--mlp-chunk", "5")
        self.assert_curves_match(dist.losses(one), dist.losses(two), range(1, 11), rel=1e-5)
        self.assert_weights_close(os.path.join(one, "checkpoint-10"),
                                  os.path.join(two, "checkpoint-10"))

    def test_template_backend(self):
        # the plugin author's template runs the tp ops through the SDK's
        # host executor and the host's collectives, as cpu does
        self.use(self.llama)
        steps = ["--max-steps", "3", "--schedule", "constant", "--batch-size", "4"]
        one, two = self.path("one"), self.path("two")
        self.train(*steps, "--out", one)
        self.train_mpi(2, *steps, "--out", two, "--tp", "2", "--backend", "template")
        self.assert_curves_match(dist.losses(one), dist.losses(two), range(1, 4), rel=1e-5)


class DataParallelTest(Base):
    def test_tp2_by_dp2_matches_one_process(self):
        self.use(self.llama)
        steps = ["--max-steps", "20", "--schedule", "constant"]
        one, four = self.path("one"), self.path("four")
        # the global batch of 4 rows: 2 replicas x batch 2 (their 2 tp ranks
        # read the same rows)
        self.train(*steps, "--out", one, "--batch-size", "2", "--grad-accum", "2")
        r = self.train_mpi(4, *steps, "--out", four, "--tp", "2", "--batch-size", "2")
        self.assertIn("tensor parallel: 4 ranks = dp 2 x pp 1 x tp 2", r.stderr)
        self.assertIn("rank 3: dp 1, pp 0, tp 1", r.stderr)
        self.assert_curves_match(dist.losses(one), dist.losses(four), range(1, 21), rel=1e-5)
        self.assert_weights_close(os.path.join(one, "checkpoint-20"),
                                  os.path.join(four, "checkpoint-20"))


def norms(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return {m["step"]: m["grad_norm"] for m in rows if "grad_norm" in m}


class ZeroTest(Base):
    """ZeRO-1 inside the data-parallel group: each replica keeps and updates
    the optimizer state of its share of the parameters (each tp rank its
    parts of them), then broadcasts the update over its dp group."""

    ARGS = ["--schedule", "constant", "--save-every", "10", "--keep", "0", "--max-steps", "20"]

    def check_model(self, model, extra=()):
        """One process (batch 2 x accumulation 2) against tp 2 x dp 2 with
        ZeRO-1 (batch 2 a replica); returns both run folders."""
        self.use(model)
        args = self.ARGS + list(extra)
        one, zero = self.path("one"), self.path("zero")
        self.train(*args, "--out", one, "--batch-size", "2", "--grad-accum", "2")
        r = self.train_mpi(4, *args, "--out", zero, "--batch-size", "2", "--tp", "2",
                           "--zero", "1")
        # the layout line before step 0 says ZeRO-1; the plan counts one share
        self.assertIn("tensor parallel: 4 ranks = dp 2 x pp 1 x tp 2", r.stderr)
        self.assertIn("; ZeRO-1 over dp: each replica keeps the optimizer state of its share",
                      r.stderr)
        self.assertIn("per rank (4 ranks, dp 2 x tp 2, ZeRO-1 over dp;", r.stderr)
        self.assertIn("(replica 0's share)", r.stderr)
        self.assert_curves_match(dist.losses(one), dist.losses(zero), range(1, 21), rel=1e-5)
        # clipping acts (the norm passes --clip 1) by the whole model's norm:
        # every gradient counted once, those another replica updates too
        n1, n2 = norms(one), norms(zero)
        self.assertGreater(max(n1.values()), 1.0)
        self.assert_curves_match(n1, n2, range(1, 21), rel=1e-5)
        ckpt = os.path.join(zero, "checkpoint-20")
        self.assert_weights_close(os.path.join(one, "checkpoint-20"), ckpt)
        # one shard per replica, of whole tensors: together one process's state
        index, merged = dist.read_zero_shards(self, ckpt, 4, 2)
        self.assertEqual(index["metadata"]["tp_size"], 2)
        want = dist.read_f32_safetensors(os.path.join(one, "checkpoint-20",
                                                      "optimizer.safetensors"))
        self.assertEqual(sorted(merged), sorted(want))
        for name in want:
            self.assertEqual(len(merged[name]), len(want[name]), name)  # whole, not a part
            worst = max(abs(x - y) for x, y in zip(merged[name], want[name]))
            self.assertLessEqual(worst, 1e-5, name)
        return one, zero

    def test_llama_gqa_and_resume_without_zero(self):
        one, zero = self.check_model(self.llama)
        # its step-10 checkpoint resumed as one process without ZeRO-1
        # continues the uninterrupted curve (the moments were whole)
        res = self.path("resumed")
        r = self.train(*self.ARGS, "--out", res, "--batch-size", "2", "--grad-accum", "2",
                       "--resume", os.path.join(zero, "checkpoint-10"))
        self.assertIn("(--tp 1 --pp 1 --cp 1; was 2 x 2 x 1 over 4 ranks, --tp 2 --pp 1 --cp 1)", r.stderr)
        self.assertEqual(sorted(dist.losses(res)), list(range(11, 21)))
        self.assert_curves_match(dist.losses(one), dist.losses(res), range(11, 21), rel=1e-5)
        self.assert_weights_close(os.path.join(one, "checkpoint-20"),
                                  os.path.join(res, "checkpoint-20"))

    def test_gpt2(self):
        # with dropout: the masks follow the rows, whatever the layout
        self.check_model(self.gpt2, ("--dropout", "0.1"))


class DeviceGroupsTest(Base):
    """ABI 1.7 group communicators on a backend with collectives of its own
    (the commfake test plugin: MPI on its buffers, as cuda has NCCL): under
    --tp the host makes a device communicator for the "tp" group and one
    for "dp" (each id from the group's rank 0 over the group's broadcast;
    commfake checks the id's maker and the rank and size against
    MPI_Comm_split), and sums the gradients over dp on the latter."""

    def check(self, *extra):
        """One process against tp 2 x dp 2 on commfake with `extra`; the
        run's stderr."""
        if not CFG.commfake_dir or not os.path.isdir(CFG.commfake_dir):
            self.skipTest("no commfake plugin (it is built with MPI only): %r" % CFG.commfake_dir)
        self.use(self.llama)
        steps = ["--max-steps", "6", "--schedule", "constant", "--batch-size", "2"]
        plugin = ["--plugin-path", CFG.commfake_dir]
        one, four = self.path("one"), self.path("four")
        self.train(*steps, "--out", one, "--grad-accum", "2")
        r = dist.mpirun(4, plugin + ["train"] + self.common + steps +
                        ["--out", four, "--tp", "2", "--backend", "commfake"] + list(extra))
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-4000:])
        self.assertIn("tensor parallel: 4 ranks = dp 2 x pp 1 x tp 2", r.stderr)
        self.assertIn("the tp ops on commfake's communicator of the tp group and the gradients "
                      "summed over dp on its dp group's (device communicators per group, "
                      "ABI 1.7)", r.stderr)
        self.assertIn("host staging of the gradient all-reduce none (on the device)", r.stderr)
        self.assert_curves_match(dist.losses(one), dist.losses(four), range(1, 7), rel=1e-5)
        self.assert_weights_close(os.path.join(one, "checkpoint-6"),
                                  os.path.join(four, "checkpoint-6"))
        return r.stderr

    def test_tp2_by_dp2_on_device_communicators(self):
        self.check()

    def test_zero_broadcasts_on_the_dp_communicator(self):
        # the owners are dp-group ranks: the roots of MPI_Bcast on
        # commfake's dp communicator of 2 ranks (a world rank would be out of
        # its range or name the wrong replica)
        err = self.check("--zero", "1")
        self.assertIn("; ZeRO-1 over dp", err)


class ResumeTest(Base):
    def test_resume_across_layouts(self):
        self.use(self.llama)
        args = ["--schedule", "constant", "--save-every", "10", "--keep", "0",
                "--batch-size", "4"]
        ref = self.path("ref")
        self.train(*args, "--max-steps", "20", "--out", ref)
        want = dist.losses(ref)
        # tp 2 for 10 steps, then tp 1 from its checkpoint
        a = self.path("a")
        self.train_mpi(2, *args, "--max-steps", "10", "--out", a, "--tp", "2")
        self.train(*args, "--max-steps", "20", "--out", a, "--resume", "latest")
        self.assert_curves_match(want, dist.losses(a), range(1, 21), rel=1e-5)
        # tp 1 for 10 steps, then tp 2
        b = self.path("b")
        self.train(*args, "--max-steps", "10", "--out", b)
        r = self.train_mpi(2, *args, "--max-steps", "20", "--out", b, "--resume", "latest",
                           "--tp", "2")
        self.assertIn("(--tp 2 --pp 1 --cp 1; was", r.stderr)
        self.assert_curves_match(want, dist.losses(b), range(1, 21), rel=1e-5)
        self.assert_weights_close(os.path.join(ref, "checkpoint-20"),
                                  os.path.join(b, "checkpoint-20"))


def write_f32_safetensors(path, tensors):
    """Writes {name: (shape, [floats])} as an f32 safetensors file."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        shape, values = tensors[name]
        blob = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": list(shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class VocabTest(Base):
    """A vocabulary --tp 2 does not divide: the tiny Llama with one more
    token (97 rows of embed_tokens and lm_head: 49 a rank, rank 1's last
    one padding). Trains like one process, and its checkpoints hold the 97
    real rows (padding dropped) and resume across layouts."""

    def make_model(self):
        src, dst = self.llama, self.path("llama97")
        os.makedirs(dst)
        with open(os.path.join(src, "config.json")) as f:
            config = json.load(f)
        config["vocab_size"] = 97
        with open(os.path.join(dst, "config.json"), "w") as f:
            json.dump(config, f)
        weights = dist.read_f32_safetensors(os.path.join(src, "model.safetensors"))
        hidden = config["hidden_size"]
        tensors = {}
        for name, values in weights.items():
            if name in ("model.embed_tokens.weight", "lm_head.weight"):
                extra = [0.01 * ((k * 7) % 13 - 6) for k in range(hidden)]
                tensors[name] = ((97, hidden), list(values) + extra)
            else:
                tensors[name] = (None, list(values))
        with open(os.path.join(src, "model.safetensors"), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for name, (shape, values) in list(tensors.items()):
            if shape is None:
                tensors[name] = (header[name]["shape"], values)
        write_f32_safetensors(os.path.join(dst, "model.safetensors"), tensors)
        return dst

    def test_padded_vocabulary(self):
        self.use(self.make_model())
        args = ["--schedule", "constant", "--save-every", "10", "--keep", "0",
                "--batch-size", "4"]
        ref = self.path("ref")
        self.train(*args, "--max-steps", "20", "--out", ref)
        want = dist.losses(ref)
        a = self.path("a")  # tp 2 for 10 steps, then one process
        self.train_mpi(2, *args, "--max-steps", "10", "--out", a, "--tp", "2")
        saved = dist.read_f32_safetensors(os.path.join(a, "checkpoint-10", "model.safetensors"))
        hidden = len(saved["model.norm.weight"])
        self.assertEqual(len(saved["lm_head.weight"]), 97 * hidden)
        self.assertEqual(len(saved["model.embed_tokens.weight"]), 97 * hidden)
        self.train(*args, "--max-steps", "20", "--out", a, "--resume", "latest")
        self.assert_curves_match(want, dist.losses(a), range(1, 21), rel=1e-5)
        b = self.path("b")  # one process for 10 steps, then tp 2
        self.train(*args, "--max-steps", "10", "--out", b)
        self.train_mpi(2, *args, "--max-steps", "20", "--out", b, "--resume", "latest",
                       "--tp", "2")
        self.assert_curves_match(want, dist.losses(b), range(1, 21), rel=1e-5)
        for run_dir in (a, b):
            self.assert_weights_close(os.path.join(ref, "checkpoint-20"),
                                      os.path.join(run_dir, "checkpoint-20"))


class RefuseTest(Base):
    def refused(self, n, args, rc, text, model=None):
        """Runs a refused train (n ranks under mpirun, or 0: one process)
        and checks its exit status and message."""
        self.use(model or self.llama)
        cmd = ["train"] + self.common + ["--max-steps", "2", "--out", self.path("refused")]
        r = dist.mpirun(n, cmd + args) if n else dist.run(cmd + args)
        if n:  # mpirun ends with the first rank's status
            self.assertNotEqual(r.returncode, 0, r.stderr[-2000:])
        else:
            self.assertEqual(r.returncode, rc, r.stderr[-2000:])
        self.assertIn(text, r.stderr)
        return r

    def test_bad_inputs(self):
        # usage errors (exit 2), whatever the world
        self.refused(0, ["--tp", "2", "--fused-optimizer"], 2,
                     "does not run with --fused-optimizer")
        self.refused(0, ["--tp", "2", "--optimizer", "adafactor"], 2,
                     "does not run with --optimizer adafactor")
        self.refused(0, ["--tp", "2", "--sample-tokens", "4"], 2,
                     "does not run with --sample-tokens")
        self.refused(0, ["--tp", "2", "--distributed", "none"], 2,
                     "does not run with --distributed none")
        # the vocabulary is split: the fused chunked head and loss would need all of it
        self.refused(0, ["--tp", "2", "--loss-chunk", "4"], 2, "does not run with --loss-chunk")
        self.refused(0, ["--tp", "0"], 2, "--tp must be 1 or more")
        # runtime errors (exit 1): one process; the world, the heads
        self.refused(0, ["--tp", "2"], 1,
                     "--tp 2 splits the model over 2 ranks, and this run is one process")
        self.refused(3, ["--tp", "2"], 1, "--tp 2 x --pp 1 = 2 does not divide the world of 3")
        # ZeRO-1 over a dp group of one rank would shard nothing (with
        # --pp too: --tp 2 --pp 2 on 4 ranks is one replica)
        self.refused(4, ["--tp", "2", "--pp", "2", "--zero", "1"], 1,
                     "--pp 2 x --tp 2 on 4 ranks makes one replica (dp 1): start it with "
                     "mpirun -np 8")
        self.refused(2, ["--tp", "2", "--zero", "1"], 1,
                     "--zero 1 shards the optimizer state over the data-parallel replicas, and "
                     "--tp 2 on 2 ranks makes one replica (dp 1)")
        self.refused(3, ["--tp", "3"], 1, "--tp 3 does not divide the model's 4 attention heads")
        self.refused(4, ["--tp", "4"], 1, "--tp 4 does not divide the model's 2 attention heads",
                     model=self.gpt2)
        self.refused(2, ["--tp", "2", "--backend", "dataflow"], 1,
                     "--tp 2: --backend dataflow runs the whole step in one call")

    def test_backend_without_the_ops(self):
        # the template plugin knows every op through the reference, so take
        # a backend that refuses them by name: opencl has no kernels for
        # them (without an OpenCL device it is unavailable: then skip)
        self.use(self.llama)
        r = dist.mpirun(2, ["train"] + self.common + ["--max-steps", "1", "--out",
                                                      self.path("o"), "--tp", "2",
                                                      "--backend", "opencl"])
        if "opencl" in r.stderr and "UNAVAILABLE" in r.stderr.upper() and "tp_copy" not in \
                r.stderr:
            self.skipTest("no OpenCL device here: %s" % r.stderr[-300:])
        self.assertNotEqual(r.returncode, 0)
        self.assertRegex(r.stderr, r"no kernel for op '(tp_copy|tp_reduce|all_reduce|vocab_[a-z_]+)'")


def main():
    global CFG
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--models", required=True, help="tests/fixtures/models")
    parser.add_argument("--mpi-shim", required=True, help="the build's libty_mpi.so")
    parser.add_argument("--commfake-dir", default="",
                        help="the commfake test plugin's folder (DeviceGroupsTest)")
    CFG, rest = parser.parse_known_args()
    dist.CFG = CFG
    cli_util.CFG = CFG
    return dist.run_suites(rest)


if __name__ == "__main__":
    sys.exit(main())
