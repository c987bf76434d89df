#!/usr/bin/env python3
"""End-to-end tests of pipeline-parallel `trainyard train --pp N` under Open
MPI's mpirun on the cpu backend (issue 17; Python standard library only).

- PipelineTest: --pp 2 with the 1F1B and the interleaved schedule trains the
  tiny Llama (GQA) and GPT-2 (tied embeddings) fixtures for 20 steps as one
  process does with the same global batch (the same --grad-accum): per-step
  loss within 1e-5 relative, final weights within 1e-5 (GPT-2's under SGD:
  see weights_optimizer); the partition, the rank layout and the bubble are
  printed by rank 0 alone; Adafactor's factored state moves whole.
- DataParallelPipelineTest: --pp 2 x 2 replicas (4 ranks), with dropout,
  equals one process with the replicas' micro-batches as accumulation.
- ZeroPipelineTest: --pp 2 --zero 1 x 2 replicas (4 ranks), the tiny Llama
  (1F1B) and GPT-2 (tied, interleaved) for 20 steps against one process
  with the same global batch: per-step loss within 1e-5 relative, final
  weights and optimizer state within 1e-5 (GPT-2's key-bias third left
  out); a pp2 x dp2 ZeRO-1 checkpoint (one whole optimizer file) resumed
  by one process, and a one-process one resumed at pp2 x dp2 ZeRO-1,
  continue the curve.
- TensorPipelineTest: --tp 2 --pp 2 (4 ranks: each stage split over its 2
  tp ranks), 1F1B and interleaved, trains the tiny Llama (GQA) and GPT-2
  (tied) for 20 steps as one process does: per-step loss within 1e-5
  relative, final weights and optimizer state within 1e-5 (GPT-2's key-bias
  third, pure rounding under AdamW, left out); the rank layout printed once
  before the steps; a tp2 x pp2 checkpoint (one model, one optimizer file)
  resumed by one process and a one-process one resumed at tp2 x pp2
  continue the curve; 8 ranks (dp 2 x pp 2 x tp 2, dropout) equal one
  process with the replicas' micro-batches as accumulation.
- ResumeTest: a --pp 2 checkpoint (one model.safetensors, one
  optimizer.safetensors) resumed by one process, and a one-process
  checkpoint resumed at --pp 2 interleaved, continue the uninterrupted curve.
- RefuseTest: --pp larger than the layer count, micro-batches not divisible
  for interleaved, too many virtual chunks, --pp with levers it does not
  take (--fused-optimizer, --dump-graph), --zero 1 with one replica, a world not divisible by
  --pp (or by --tp x --pp), --pp on one process, the dataflow backend (whole steps only),
  pipeline options without --pp, a stage over --memory-limit; a rank that
  hangs is named within --dist-timeout.

Without mpirun or the MPI shim the suite exits 77 (skipped) and says why.
"""
import os
import re
import shutil
import sys
import tempfile
import unittest

import cli_util
import test_distributed_cli as dist

REL = 1e-5


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ty_pp_test_")
        self.data = cli_util.make_ids_dataset(os.path.join(self.tmp, "data"), docs=80)
        self.cache = os.path.join(self.tmp, "cache")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def common(self, model):
        return ["--model", os.path.join(dist.CFG.models, model), "--data", self.data,
                "--lr", "2e-3", "--backend", dist.BACKEND, "--log-every", "100",
                "--cache-dir", self.cache, "--schedule", "constant"]

    def train(self, model, *args, rc=0):
        r = dist.run(["train"] + self.common(model) + list(args))
        self.assertEqual(r.returncode, rc, r.stderr[-3000:])
        return r

    def train_mpi(self, n, model, *args, rc=0, env=None):
        r = dist.mpirun(n, ["train"] + self.common(model) + list(args), env=env)
        self.assertEqual(r.returncode, rc, (r.stdout + r.stderr)[-4000:])
        return r

    def assert_curves(self, a, b, steps):
        la, lb = dist.losses(a), dist.losses(b)
        for s in steps:
            self.assertIn(s, la)
            self.assertIn(s, lb)
            self.assertLessEqual(abs(la[s] - lb[s]), REL * abs(la[s]),
                                 "step %d: %r vs %r" % (s, la[s], lb[s]))

    def check_replicas(self, n, one, out, steps, common, *layout):
        """n ranks of 2 replicas (--grad-accum 2 each) against `one`, the
        one-process run with --grad-accum 4 and the same `common`; the
        run's stderr."""
        r = self.train_mpi(n, "llama", *common, "--grad-accum", "2", "--out", out, *layout,
                           "--overwrite")
        self.assertIn("%d steps of 8 rows" % steps, r.stderr)
        self.assert_curves(one, out, range(1, steps + 1))
        self.assert_files(one, out, steps)
        return r.stderr

    def assert_files(self, a, b, step, files=("model.safetensors", "optimizer.safetensors")):
        for name in files:
            wa = dist.read_f32_safetensors(os.path.join(a, "checkpoint-%d" % step, name))
            wb = dist.read_f32_safetensors(os.path.join(b, "checkpoint-%d" % step, name))
            self.assertEqual(sorted(wa), sorted(wb), name)
            for key in wa:
                worst = max(abs(x - y) for x, y in zip(wa[key], wb[key]))
                self.assertLessEqual(worst, REL, "%s: %s" % (name, key))

    def assert_model_close(self, a, b, step):
        # GPT-2's key bias gets a gradient of pure rounding that AdamW scales
        # to lr-sized steps: compared on its q and v thirds (as
        # test_tensor_parallel_cli does); every other tensor in full
        wa = dist.read_f32_safetensors(os.path.join(a, "checkpoint-%d" % step, "model.safetensors"))
        wb = dist.read_f32_safetensors(os.path.join(b, "checkpoint-%d" % step, "model.safetensors"))
        self.assertEqual(sorted(wa), sorted(wb))
        for key in wa:
            x, y = wa[key], wb[key]
            self.assertEqual(len(x), len(y), key)
            if key.endswith("attn.c_attn.bias"):
                third = len(x) // 3
                x, y = x[:third] + x[2 * third:], y[:third] + y[2 * third:]
            worst = max(abs(u - v) for u, v in zip(x, y))
            self.assertLessEqual(worst, REL, key)


class PipelineTest(Base):
    steps = ["--max-steps", "20", "--batch-size", "2", "--grad-accum", "2"]

    def check_model(self, model, optimizer):
        opt = ["--optimizer", optimizer]
        one = self.path(model + "_one")
        self.train(model, *self.steps, *opt, "--out", one)
        for schedule in ("1f1b", "interleaved"):
            out = self.path("%s_%s" % (model, schedule))
            r = self.train_mpi(2, model, *self.steps, *opt, "--out", out, "--pp", "2",
                               "--pp-schedule", schedule)
            err = r.stderr
            chunks = 2 if schedule == "1f1b" else 4
            self.assertEqual(err.count("pipeline parallel: 2 stages"), 1, err)
            self.assertEqual(len(re.findall(r"^  chunk \d on stage \d: ", err, re.M)), chunks, err)
            self.assertIn("rank layout (world 2 = dp 1 x pp 2 x tp 1 x cp 1):", err)
            self.assertIn("  rank 1: dp 0, pp 1, tp 0, device cpu", err)
            self.assertRegex(err, r"  stage 1 memory plan: peak [\d.]+ KiB \(parameters ")
            self.assertRegex(err, r"pipeline bubble: ideal %s%%.*stage 0 [\d.]+%% stage 1 "
                                  r"[\d.]+%%" % ("33.3" if schedule == "1f1b" else "20.0"))
            self.assertEqual(sorted(dist.losses(out)), list(range(1, 21)))  # rank 0 alone
            self.assert_curves(one, out, range(1, 21))
            self.assert_files(one, out, 20)
        return err

    def test_llama_adamw(self):
        err = self.check_model("llama", "adamw")
        # the balanced partition of the 2-layer model into 4 chunks
        self.assertIn("chunk 0 on stage 0: embedding (cost", err)
        self.assertIn("chunk 3 on stage 1: norm + head + loss (cost", err)

    def test_gpt2_tied_embeddings(self):
        # GPT-2's key bias gets a gradient of pure rounding (softmax ignores
        # it) that Adam scales to lr-sized steps, so weights compare under
        # SGD (as the data-parallel tests do); the tied wte's two copies are
        # summed between the first and the last stage, and both stay equal.
        self.check_model("gpt2", "sgd")
        one, out = self.path("gpt2_adamw_one"), self.path("gpt2_adamw_pp")
        self.train("gpt2", *self.steps, "--out", one)
        self.train_mpi(2, "gpt2", *self.steps, "--out", out, "--pp", "2")
        self.assert_curves(one, out, range(1, 21))
        self.assert_files(one, out, 20, files=("optimizer.safetensors",))


    def test_messages_in_pieces(self):
        # A stage's state of a 1B model (9 GB) is more than one MPI message
        # can count: point-to-point messages go in pieces of at most 1 GiB
        # (distributed/mpi_shim.c). Pieces of 1000 bytes here: the weights' scatter,
        # the activations and gradients between the stages and the gather at
        # the save all cross in several pieces, and the run equals one
        # process's.
        steps = self.steps[:1] + ["5"] + self.steps[2:]
        one, out = self.path("piece_one"), self.path("piece_pp")
        self.train("llama", *steps, "--out", one)
        self.train_mpi(2, "llama", *steps, "--out", out, "--pp", "2",
                       env={"TRAINYARD_DEBUG_MPI_PIECE": "1000"})
        self.assert_curves(one, out, range(1, 6))
        self.assert_files(one, out, 5)

    def test_adafactor_factored_state(self):
        # Adafactor's factored moments ([rows], [cols]) are not of their
        # parameter's shape: they move between rank 0 and the stages whole
        steps = self.steps[:1] + ["10"] + self.steps[2:] + ["--optimizer", "adafactor"]
        one, out = self.path("ada_one"), self.path("ada_pp")
        self.train("llama", *steps, "--out", one)
        self.train_mpi(2, "llama", *steps, "--out", out, "--pp", "2")
        self.assert_curves(one, out, range(1, 11))
        self.assert_files(one, out, 10)


class DataParallelPipelineTest(Base):
    def test_two_replicas_of_two_stages(self):
        common = ["--max-steps", "20", "--batch-size", "2", "--dropout", "0.1"]
        one, four = self.path("one"), self.path("four")
        self.train("llama", *common, "--grad-accum", "4", "--out", one)
        for schedule in ("1f1b", "interleaved"):
            err = self.check_replicas(4, one, four, 20, common, "--pp", "2", "--pp-schedule",
                                      schedule)
            self.assertIn("rank layout (world 4 = dp 2 x pp 2 x tp 1 x cp 1):", err)
            self.assertIn("  rank 2: dp 1, pp 0, tp 0", err)


class FromSeedTest(Base):
    """A preset trained from scratch: each stage (and under --tp each of its
    ranks, its part) initializes its own chunks from the seed (nothing
    travels from rank 0), and the run is the one process's with the same
    seed. SGD: AdamW would scale the split's rounding in near-zero
    gradients of a fresh model to lr-sized steps."""

    def test_presets(self):
        for preset, schedule, tp in (("llama-tiny", "1f1b", 1), ("gpt2-tiny", "interleaved", 1),
                                     ("llama-tiny", "1f1b", 2)):
            common = ["--preset", preset, "--data", self.data, "--max-steps", "6",
                      "--batch-size", "2", "--grad-accum", "2", "--lr", "2e-3",
                      "--backend", dist.BACKEND, "--log-every", "1", "--cache-dir", self.cache,
                      "--schedule", "constant", "--seed", "7", "--optimizer", "sgd"]
            one, two = self.path(preset + "_one"), self.path("%s_pp_tp%d" % (preset, tp))
            if not os.path.isdir(one):
                r = dist.run(["train"] + common + ["--out", one])
                self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            r = dist.mpirun(2 * tp, ["train"] + common + ["--out", two, "--pp", "2", "--tp",
                                                          str(tp), "--pp-schedule", schedule])
            self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-4000:])
            self.assertIn("initialized from scratch", r.stderr)
            self.assert_curves(one, two, range(1, 7))
            self.assert_files(one, two, 6)


class ZeroPipelineTest(Base):
    """--pp 2 --zero 1 on 4 ranks (2 replicas of 2 stages): each chunk's
    parameters shared over the replicas, each replica's optimizer updating
    its share, the owners broadcasting after each step; --zero 2 likewise
    (GPT-2, interleaved), each gradient summed over the replicas in the
    stage's backward graph and kept by its owner alone (the tied embedding's
    two copies summed by their one owner's reduce graphs)."""
    batch = ["--batch-size", "2"]

    def test_llama(self):
        one, four = self.path("one"), self.path("four")
        self.train("llama", *self.batch, "--max-steps", "20", "--grad-accum", "4", "--out", one)
        err = self.check_replicas(4, one, four, 20, self.batch + ["--max-steps", "20"],
                                  "--pp", "2", "--zero", "1")
        self.assertIn("ZeRO-1 over the 2 dp replicas: each chunk's parameters shared", err)

    def test_gpt2_tied_interleaved(self):
        # the tied wte: one owner for its copies on chunk 0 (stage 0) and
        # chunk 3 (stage 1); GPT-2's key bias compared on its q and v thirds
        # under AdamW (assert_model_close)
        one, four = self.path("one"), self.path("four")
        steps = self.batch + ["--max-steps", "20"]
        self.train("gpt2", *steps, "--grad-accum", "4", "--out", one)
        for zero, out in (("1", four), ("2", self.path("four2"))):
            r = self.train_mpi(4, "gpt2", *steps, "--grad-accum", "2", "--out", out, "--pp",
                               "2", "--zero", zero, "--pp-schedule", "interleaved")
            self.assert_curves(one, out, range(1, 21))
            self.assert_model_close(one, out, 20)
            self.assert_files(one, out, 20, files=("optimizer.safetensors",))
        self.assertIn("ZeRO-2 over the 2 dp replicas: each chunk's parameters shared among "
                      "them by size", r.stderr)
        self.assertIn("keeping state and gradient sums for its share", r.stderr)
        self.assertIn("by all_reduce ops in each chunk's backward graph as each gradient "
                      "completes (ZeRO-2; the tied embedding's two copies in its reduce graph)",
                      r.stderr)

    def test_device_broadcasts(self):
        # the device path on commfake (MPI on its buffers, as cuda has
        # NCCL): the gradient sums and the owners' broadcasts on the dp
        # group's device communicator, the roots its ranks (dp indices)
        if not dist.CFG.commfake_dir or not os.path.isdir(dist.CFG.commfake_dir):
            self.skipTest("no commfake plugin (it is built with MPI only): %r"
                          % dist.CFG.commfake_dir)
        one, four = self.path("one"), self.path("four")
        steps = self.batch + ["--max-steps", "6"]
        self.train("llama", *steps, "--grad-accum", "4", "--out", one)
        r = dist.mpirun(4, ["--plugin-path", dist.CFG.commfake_dir, "train"] +
                        self.common("llama") + steps +
                        ["--grad-accum", "2", "--out", four, "--pp", "2", "--zero", "1",
                         "--backend", "commfake"])
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-4000:])
        self.assertIn("optimizer step on the devices' dp communicators", r.stderr)
        self.assert_curves(one, four, range(1, 7))
        self.assert_files(one, four, 6)

    def test_resume_across_layouts(self):
        common = self.batch + ["--save-every", "5", "--keep", "0"]
        ref = self.path("ref")
        self.train("llama", *common, "--grad-accum", "4", "--max-steps", "10", "--out", ref)
        # pp2 x dp2 ZeRO-1 -> one process: one model, one whole optimizer file
        a1, a2 = self.path("a1"), self.path("a2")
        self.train_mpi(4, "llama", *common, "--grad-accum", "2", "--max-steps", "5", "--out", a1,
                       "--pp", "2", "--zero", "1")
        names = sorted(os.listdir(os.path.join(a1, "checkpoint-5")))
        self.assertIn("optimizer.safetensors", names)
        self.assertFalse([n for n in names if n.startswith(("optimizer-", "model-"))], names)
        self.assert_files(ref, a1, 5)
        self.train("llama", *common, "--grad-accum", "4", "--max-steps", "10", "--out", a2,
                   "--resume", os.path.join(a1, "checkpoint-5"))
        self.assert_curves(ref, a2, range(6, 11))
        # one process -> pp2 x dp2 ZeRO-1: each state to its owner replica
        b2 = self.path("b2")
        self.train_mpi(4, "llama", *common, "--grad-accum", "2", "--max-steps", "10", "--out",
                       b2, "--pp", "2", "--zero", "1", "--resume",
                       os.path.join(ref, "checkpoint-5"))
        self.assert_curves(ref, b2, range(6, 11))
        self.assert_files(ref, b2, 10)


class TensorPipelineTest(Base):
    """--tp 2 --pp 2 on 4 ranks: each stage split over its 2 tp ranks."""
    steps = ["--max-steps", "20", "--batch-size", "2", "--grad-accum", "2"]

    def check_model(self, model, *extra):
        one = self.path(model + "_one")
        self.train(model, *self.steps, *extra, "--out", one)
        for schedule in ("1f1b", "interleaved"):
            out = self.path("%s_%s" % (model, schedule))
            r = self.train_mpi(4, model, *self.steps, *extra, "--out", out, "--tp", "2",
                               "--pp", "2", "--pp-schedule", schedule)
            err = r.stderr
            # the layout, before step 0, once (rank 0): tp fastest
            self.assertEqual(err.count("rank layout (world 4 = dp 1 x pp 2 x tp 2 x cp 1):"), 1, err)
            for rank, (pp, tp) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
                self.assertIn("  rank %d: dp 0, pp %d, tp %d, device cpu" % (rank, pp, tp), err)
            self.assertLess(err.index("  rank 3: dp 0"), err.index("Step [20/20]"))
            self.assertIn("split over its 2 tp ranks", err)
            self.assertEqual(sorted(dist.losses(out)), list(range(1, 21)))  # rank 0 alone
            self.assert_curves(one, out, range(1, 21))
            self.assert_model_close(one, out, 20)
            self.assert_files(one, out, 20, files=("optimizer.safetensors",))

    def test_llama_gqa(self):
        self.check_model("llama")

    def test_gpt2_tied_embeddings(self):
        # with dropout: the masks follow the rows and layers, not the split
        self.check_model("gpt2", "--dropout", "0.1")

    def test_with_data_parallel(self):
        # the mpirun -np 8 --tp 2 --pp 2: 2 replicas of 2 stages of
        # 2 tp ranks, with dropout, as one process with the replicas'
        # micro-batches as accumulation
        common = ["--max-steps", "10", "--batch-size", "2", "--dropout", "0.1"]
        one, eight = self.path("one"), self.path("eight")
        self.train("llama", *common, "--grad-accum", "4", "--out", one)
        err = self.check_replicas(8, one, eight, 10, common, "--tp", "2", "--pp", "2",
                                  "--pp-schedule", "interleaved")
        self.assertIn("rank layout (world 8 = dp 2 x pp 2 x tp 2 x cp 1):", err)
        self.assertIn("  rank 5: dp 1, pp 0, tp 1, device cpu", err)

    def test_resume_across_layouts(self):
        common = ["--batch-size", "2", "--grad-accum", "2", "--save-every", "5", "--keep", "0"]
        ref = self.path("ref")
        self.train("llama", *common, "--max-steps", "10", "--out", ref)
        # tp2 x pp2 -> one process: one Hugging Face model, one optimizer file
        a1, a2 = self.path("a1"), self.path("a2")
        self.train_mpi(4, "llama", *common, "--max-steps", "5", "--out", a1, "--tp", "2",
                       "--pp", "2")
        names = sorted(os.listdir(os.path.join(a1, "checkpoint-5")))
        self.assertIn("model.safetensors", names)
        self.assertIn("optimizer.safetensors", names)
        self.assertFalse([n for n in names if n.startswith(("optimizer-", "model-"))], names)
        self.assert_files(ref, a1, 5)
        self.train("llama", *common, "--max-steps", "10", "--out", a2, "--resume",
                   os.path.join(a1, "checkpoint-5"))
        self.assert_curves(ref, a2, range(6, 11))
        # one process -> tp2 x pp2 (interleaved)
        b2 = self.path("b2")
        self.train_mpi(4, "llama", *common, "--max-steps", "10", "--out", b2, "--tp", "2",
                       "--pp", "2", "--pp-schedule", "interleaved", "--resume",
                       os.path.join(ref, "checkpoint-5"))
        self.assert_curves(ref, b2, range(6, 11))
        self.assert_files(ref, b2, 10)


class ResumeTest(Base):
    def test_resume_across_layouts(self):
        common = ["--batch-size", "2", "--grad-accum", "2", "--save-every", "10", "--keep", "0"]
        ref = self.path("ref")
        self.train("gpt2", *common, "--max-steps", "20", "--out", ref)
        # pp2 -> pp1
        a1, a2 = self.path("a1"), self.path("a2")
        self.train_mpi(2, "gpt2", *common, "--max-steps", "10", "--out", a1, "--pp", "2")
        names = sorted(os.listdir(os.path.join(a1, "checkpoint-10")))
        self.assertIn("model.safetensors", names)
        self.assertIn("optimizer.safetensors", names)  # one file, not shards
        self.assertFalse([n for n in names if n.startswith("optimizer-")], names)
        self.assert_files(ref, a1, 10, files=("optimizer.safetensors",))
        self.train("gpt2", *common, "--max-steps", "20", "--out", a2, "--resume",
                   os.path.join(a1, "checkpoint-10"))
        self.assert_curves(ref, a2, range(11, 21))
        # pp1 -> pp2 (interleaved)
        b2 = self.path("b2")
        self.train_mpi(2, "gpt2", *common, "--max-steps", "20", "--out", b2, "--pp", "2",
                       "--pp-schedule", "interleaved", "--resume",
                       os.path.join(ref, "checkpoint-10"))
        self.assert_curves(ref, b2, range(11, 21))


class DeviceP2PTest(Base):
    """The device path (ABI 1.8 point to point) on commfake, whose sends
    block as NCCL's do (an unbatched send waits for its receive): --pp 2
    1F1B and interleaved on the tiny Llama and GPT-2 equal one process per
    step, with the activations on the devices' pp communicator and nothing
    through host memory; the same with TRAINYARD_PP_P2P=host on the host
    path; a backend of ABI 1.7 (commfake17) keeps the host path; tp 2 x
    pp 2 on 4 ranks; a bad TRAINYARD_PP_P2P is refused."""
    batch = ["--batch-size", "2", "--max-steps", "4"]

    def setUp(self):
        super().setUp()
        if not dist.CFG.commfake_dir or not os.path.isdir(dist.CFG.commfake_dir):
            self.skipTest("no commfake plugin (it is built with MPI only): %r"
                          % dist.CFG.commfake_dir)
        # a deadlock fails in seconds, naming the op that waited
        self.env = {"TRAINYARD_COMMFAKE_TIMEOUT": "30"}

    def fake(self, n, model, out, *args, plugin="commfake", env=None):
        full = dict(self.env)
        full.update(env or {})
        plugin_dir = os.path.join(os.path.dirname(dist.CFG.commfake_dir), plugin)
        common = [a for a in self.common(model)]
        common[common.index("--backend") + 1] = "commfake"
        r = dist.mpirun(n, ["--plugin-path", plugin_dir, "train"] + common + self.batch +
                        ["--out", out] + list(args), env=full)
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-4000:])
        return r.stderr

    def check(self, model, schedule, n=2, tp=()):
        one = self.path("%s_one" % model)
        if not os.path.isdir(one):
            self.train(model, *self.batch, "--grad-accum", "4", "--out", one)
        out = self.path("%s_%s_%d_dev" % (model, schedule, n))
        err = self.fake(n, model, out, "--grad-accum", "4", "--pp", "2", "--pp-schedule",
                        schedule, *tp)
        self.assertIn("activations and gradients between stages: on the devices' pp "
                      "communicator (commfake's point to point, ABI 1.8)", err)
        self.assertRegex(err, r"pipeline activations and gradients: [1-9][0-9.]* [KMG]?i?B "
                              r"between the devices on the pp communicator, 0 B through host")
        self.assert_curves(one, out, range(1, 5))
        host = self.path("%s_%s_%d_host" % (model, schedule, n))
        err = self.fake(n, model, host, "--grad-accum", "4", "--pp", "2", "--pp-schedule",
                        schedule, *tp, env={"TRAINYARD_PP_P2P": "host"})
        self.assertIn("between stages: MPI point to point through host memory", err)
        self.assertRegex(err, r": 0 B between the devices on the pp communicator, "
                              r"[1-9][0-9.]* [KMG]?i?B through host")
        self.assert_curves(one, host, range(1, 5))

    def test_llama(self):
        for schedule in ("1f1b", "interleaved"):
            self.check("llama", schedule)

    def test_gpt2_tied(self):
        for schedule in ("1f1b", "interleaved"):
            self.check("gpt2", schedule)

    def test_tp2_pp2(self):
        self.check("llama", "1f1b", n=4, tp=("--tp", "2"))

    def test_old_backend_keeps_host_path(self):
        out = self.path("old")
        err = self.fake(2, "llama", out, "--grad-accum", "2", "--pp", "2",
                        plugin="commfake17")
        self.assertIn("between stages: MPI point to point through host memory", err)
        r = dist.mpirun(2, ["--plugin-path", os.path.join(os.path.dirname(
                            dist.CFG.commfake_dir), "commfake17"), "train"] +
                        [a if a != dist.BACKEND else "commfake" for a in self.common("llama")] +
                        self.batch + ["--grad-accum", "2", "--pp", "2", "--out",
                                      self.path("old_dev")],
                        env={"TRAINYARD_PP_P2P": "device"})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("TRAINYARD_PP_P2P=device: backend 'commfake' (ABI 1.7) has no point to "
                      "point", r.stderr)
        r = dist.mpirun(2, ["--plugin-path", dist.CFG.commfake_dir, "train"] +
                        [a if a != dist.BACKEND else "commfake" for a in self.common("llama")] +
                        self.batch + ["--grad-accum", "2", "--pp", "2", "--out",
                                      self.path("bad_env")],
                        env={"TRAINYARD_PP_P2P": "nccl"})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("TRAINYARD_PP_P2P=nccl: expected 'host'", r.stderr)


class RefuseTest(Base):
    base = ["--max-steps", "2", "--batch-size", "2", "--grad-accum", "2"]

    def refused(self, n, *args, want, model="llama"):
        out = self.path("bad")
        if n == 1:
            r = self.train(model, *self.base, "--out", out, *args, rc=1)
        else:
            r = self.train_mpi(n, model, *self.base, "--out", out, "--overwrite", *args, rc=1)
        self.assertIn(want, r.stderr)

    def test_bad_layouts(self):
        self.refused(3, "--pp", "3", want="--pp 3: the model has 2 layers, fewer than the "
                                          "stages")
        self.refused(2, "--pp", "2", "--pp-schedule", "interleaved", "--grad-accum", "3",
                     want="--grad-accum 3 is not a multiple of --pp 2")
        self.refused(2, "--pp", "2", "--pp-schedule", "interleaved", "--pp-virtual", "3",
                     want="--pp 2 x --pp-virtual 3 = 6 chunks, and the model has 4 units")
        self.refused(3, "--pp", "2", want="--pp 2 does not divide the world of 3 ranks")
        self.refused(1, "--pp", "2", want="this run is one process: start it with mpirun -np 2")
        self.refused(2, "--pp", "2", "--tp", "2",
                     want="--tp 2 x --pp 2 = 4 ranks a replica, which does not divide the "
                          "world of 2 ranks")

    def test_levers_and_backends(self):
        out = self.path("bad")
        for lever, name in ((["--fused-optimizer", "--grad-accum", "1"], "--fused-optimizer"),
                            (["--dump-graph", self.path("g")], "--dump-graph")):
            r = self.train_mpi(2, "llama", *self.base, "--out", out, "--pp", "2", *lever, rc=2)
            self.assertIn("%s does not combine with --pp" % name, r.stderr)
        # ZeRO-1 shares over the replicas: --pp 2 on 2 ranks has one
        self.refused(2, "--pp", "2", "--zero", "1",
                     want="--pp 2 on 2 ranks makes one replica (dp 1): start it with mpirun "
                          "-np 4")
        self.refused(2, "--pp", "2", "--backend", "dataflow",
                     want="--backend dataflow runs whole train steps only")
        r = self.train("llama", *self.base, "--out", out, "--pp-schedule", "interleaved", rc=2)
        self.assertIn("--pp-schedule has no effect without --pp N > 1", r.stderr)
        r = self.train("llama", *self.base, "--out", out, "--pp", "0", rc=2)
        self.assertIn("--pp must be >= 1", r.stderr)

    def test_stage_memory_is_checked(self):
        # each stage's plan (about 300 KiB here) against the limit, before
        # any session allocates, each rank naming its stage; the whole
        # model's 25k parameters fit
        self.refused(2, "--pp", "2", "--memory-limit", "250KiB",
                     want="more than --memory-limit 250KiB (pipeline stage 1)")
        self.refused(2, "--pp", "2", "--memory-limit", "250KiB",
                     want="more than --memory-limit 250KiB (pipeline stage 0)")

    def test_hung_stage_is_named(self):
        out = self.path("hang")
        r = dist.mpirun(2, ["train"] + self.common("llama") +
                        ["--max-steps", "6", "--batch-size", "2", "--grad-accum", "2",
                         "--out", out, "--pp", "2", "--dist-timeout", "5"],
                        env={"TRAINYARD_DEBUG_DIST_FAULT": "1:3:hang"}, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertRegex(r.stderr, r"rank 0: trainyard train: DEADLINE_EXCEEDED: rank 1 on host \S+ did not "
                                   r".* within 5 s \(--dist-timeout\)")


if __name__ == "__main__":
    # the data-parallel suite's entry: the same options, skips and runner
    # (unittest runs this module's tests)
    sys.exit(dist.main())
