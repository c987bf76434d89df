#!/usr/bin/env python3
"""End-to-end tests of data-parallel `trainyard train` under Open MPI's
mpirun on the cpu backend (issue 11; Python standard library only).

- DataParallelTest: 2 ranks x batch 2 train the tiny GPT-2 fixture for 20
  steps as one process does with the same global batch: per-step loss within
  1e-6 relative of batch 2 x accumulation 2 and of batch 4, final weights
  within 1e-6 of batch 2 x accumulation 2 (the same sum of the same
  half-batch gradients); metrics come from rank 0 alone; the per-rank memory
  line is printed before step 0. With dropout, 2 ranks equal one process
  with accumulation 2 (the masks follow the micro-batch's global index, so
  the replicas' masks differ).
- DeviceCollectivesTest: a backend with the ABI 1.4 collectives (a test
  plugin doing them with MPI on its buffers) reduces the gradients itself:
  the same losses and weights as one process; `check` says so.
- ResumeTest: a 2-rank checkpoint resumed on 1 rank, and a 1-rank one on 2
  ranks, continue the uninterrupted curve.
- ZeroTest: --zero 1 equals plain data parallel (losses, weights, and its
  per-rank optimizer shards together equal plain's optimizer state, within
  1e-6); a sharded checkpoint resumes on 1 rank and a 1-rank one on 2 ranks
  with ZeRO-1, continuing the one-process curve.
- CkptTest: `ckpt split` and `ckpt merge` convert the optimizer state
  both ways exactly; a split checkpoint resumes the uninterrupted curve; bad
  uses.
- CompareTest: `compare --backends cpu,cpu*2` runs the second item as 2
  ranks under mpirun with half of every batch, within 1e-6 of one process;
  bad URI*N items.
- FailureTest: SIGTERM to one rank stops every rank after the same step
  with one checkpoint; a rank that hangs (a fault-injection hook) ends the run with
  an error naming it within --dist-timeout; a rank killed by SIGKILL ends
  the run; in both the previous checkpoint stays whole and resumable.
- RefuseTest: bad inputs: MPI that cannot load, --dist-timeout 0, an unknown
  --distributed, --dist-timeout without distribution, --fused-optimizer, a
  fallback device and the dataflow device (whole steps only) with several
  ranks, a resume that changes the global batch.

mpirun runs as root in CI: --allow-run-as-root, and --oversubscribe for 2
ranks on small machines. Without mpirun or the MPI shim (a build without
MPI) the suite exits 77 (skipped) and says why.
"""
import argparse
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

import cli_util

# 0, 1 or 77 (skipped) for ctest (tests/common/unittest_exit.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import unittest_exit  # noqa: E402

CFG = None
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
# One thread per rank: two ranks share the CI machine's two cores.
BACKEND = "cpu?threads=1"


def run(args, env=None, timeout=300):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([CFG.trainyard] + args, capture_output=True, text=True, env=full_env,
                          timeout=timeout)


def rank_env(env=None):
    """The environment of a process that starts ranks (mpirun, compare)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    # Open MPI's own settings for a container: no shared-memory warnings.
    full_env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    # Under the sanitizer preset, LeakSanitizer cannot tell Open MPI's own
    # leftovers from ours in a rank: MPI_Finalize unloads the components
    # that allocated them, so their frames are "<unknown module>" and no
    # suppression by library matches. Ranks run without leak checking (ASan
    # and UBSan still check every access); the one-process runs of the same
    # trainer and `ckpt` in these tests keep it.
    if "ASAN_OPTIONS" in full_env:
        full_env["ASAN_OPTIONS"] = full_env["ASAN_OPTIONS"].replace("detect_leaks=1",
                                                                    "detect_leaks=0")
    return full_env


def mpirun(n, args, env=None, timeout=300):
    full_env = rank_env(env)
    return subprocess.run(MPIRUN + ["-np", str(n), CFG.trainyard] + args, capture_output=True,
                          text=True, env=full_env, timeout=timeout)


def losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return {m["step"]: m["loss"] for m in rows if "loss" in m}


def read_f32_safetensors(path):
    """{name: [floats]} of an f32 safetensors file (the format's reference:
    an 8-byte little-endian header length, a JSON header, the data)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", (name, entry["dtype"])
        lo, hi = entry["data_offsets"]
        out[name] = struct.unpack("<%df" % ((hi - lo) // 4), data[lo:hi])
    return out


def read_zero_shards(test, ckpt, world, shard_count):
    """ZeRO-1's optimizer state in checkpoint folder `ckpt`: the index names
    `shard_count` shards (made by a world of `world` ranks) and no single
    optimizer file is left; every shard holds a share, the shares are
    disjoint and each holds what the index maps to it. Their union."""
    with open(os.path.join(ckpt, "optimizer.safetensors.index.json")) as f:
        index = json.load(f)
    test.assertEqual(index["metadata"]["world_size"], world)
    shards = sorted(set(index["weight_map"].values()))
    test.assertEqual(shards, ["optimizer-%05d-of-%05d.safetensors" % (i + 1, shard_count)
                              for i in range(shard_count)])
    test.assertFalse(os.path.exists(os.path.join(ckpt, "optimizer.safetensors")))
    merged = {}
    for shard in shards:
        part = read_f32_safetensors(os.path.join(ckpt, shard))
        test.assertTrue(part, shard)  # every replica holds a share
        test.assertFalse(set(part) & set(merged))
        test.assertEqual({n for n, f in index["weight_map"].items() if f == shard}, set(part))
        merged.update(part)
    return index, merged


def find_rank(launcher, rank):
    """The pid of MPI rank `rank` among the launcher's children, or None."""
    try:
        with open("/proc/%d/task/%d/children" % (launcher, launcher)) as f:
            children = [int(x) for x in f.read().split()]
    except OSError:
        return None
    for pid in children:
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if ("OMPI_COMM_WORLD_RANK=%d" % rank).encode() in env:
            return pid
    return None


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ty_dist_test_")
        self.data = cli_util.make_ids_dataset(os.path.join(self.tmp, "data"), docs=80)
        self.gpt2 = os.path.join(CFG.models, "gpt2")
        self.common = ["--model", self.gpt2, "--data", self.data, "--lr", "2e-3",
                       "--backend", BACKEND, "--log-every", "100",
                       "--cache-dir", os.path.join(self.tmp, "cache")]

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def train(self, *args, rc=0, env=None):
        r = run(["train"] + self.common + list(args), env=env)
        self.assertEqual(r.returncode, rc, r.stderr[-3000:])
        return r

    def train_mpi(self, n, *args, rc=0, env=None):
        r = mpirun(n, ["train"] + self.common + list(args), env=env)
        if rc == "fail":
            self.assertNotEqual(r.returncode, 0, r.stderr[-3000:])
        else:
            self.assertEqual(r.returncode, rc, (r.stdout + r.stderr)[-4000:])
        return r

    def reference(self):
        """The uninterrupted one-process run that resumed runs must follow:
        20 steps, batch 2 x accumulation 2 (it sums the two half-batches as 2
        ranks do), a constant learning rate; (common options, its batch
        options, its folder, its losses)."""
        args = ["--schedule", "constant", "--save-every", "10", "--keep", "0"]
        one = ["--batch-size", "2", "--grad-accum", "2"]
        ref = self.path("ref")
        self.train(*args, "--max-steps", "20", "--out", ref, *one)
        return args, one, ref, losses(ref)

    def assert_curves_match(self, a, b, steps, rel=1e-6):
        for s in steps:
            self.assertIn(s, a)
            self.assertIn(s, b)
            self.assertLessEqual(abs(a[s] - b[s]), rel * abs(a[s]), "step %d: %r vs %r"
                                 % (s, a[s], b[s]))

    def assert_weights_match(self, ckpt_a, ckpt_b, tol=1e-6, key_bias=True):
        """key_bias=False leaves out the k third of GPT-2's c_attn.bias: its
        gradient is rounding noise (zero in exact arithmetic), which AdamW
        scales to lr-sized steps whenever the sums run in another order."""
        wa = read_f32_safetensors(os.path.join(ckpt_a, "model.safetensors"))
        wb = read_f32_safetensors(os.path.join(ckpt_b, "model.safetensors"))
        self.assertEqual(sorted(wa), sorted(wb))
        for name in wa:
            pairs = list(zip(wa[name], wb[name]))
            if not key_bias and name.endswith("attn.c_attn.bias"):  # q | k | v
                c = len(pairs) // 3
                pairs = pairs[:c] + pairs[2 * c:]
            worst = max(abs(x - y) for x, y in pairs)
            self.assertLessEqual(worst, tol, name)



class SplitModelBase(Base):
    """Runs that split the model (--tp, --cp): the Llama fixture beside
    GPT-2, and final weights compared element by element."""

    def setUp(self):
        super().setUp()
        self.llama = os.path.join(CFG.models, "llama")

    def use(self, model):
        self.common[1] = model

    def assert_weights_close(self, ckpt_a, ckpt_b, tol=1e-5):
        wa = read_f32_safetensors(os.path.join(ckpt_a, "model.safetensors"))
        wb = read_f32_safetensors(os.path.join(ckpt_b, "model.safetensors"))
        self.assertEqual(sorted(wa), sorted(wb))
        for name in wa:
            a, b = wa[name], wb[name]
            self.assertEqual(len(a), len(b), name)
            if name.endswith("attn.c_attn.bias"):  # the key third: rounding only
                third = len(a) // 3
                a, b = a[:third] + a[2 * third:], b[:third] + b[2 * third:]
            worst = max(abs(x - y) for x, y in zip(a, b))
            self.assertLessEqual(worst, tol, name)

class DataParallelTest(Base):
    def test_two_ranks_match_one_process(self):
        steps = ["--max-steps", "20"]
        accum, big, two = self.path("accum"), self.path("big"), self.path("two")
        self.train(*steps, "--out", accum, "--batch-size", "2", "--grad-accum", "2")
        self.train(*steps, "--out", big, "--batch-size", "4")
        r = self.train_mpi(2, *steps, "--out", two, "--batch-size", "2")
        # the pre-flight plan says what each rank holds, once (rank 0)
        self.assertEqual(r.stderr.count("per rank (2 ranks, data parallel"), 1, r.stderr)
        self.assertIn("20 steps of 4 rows", r.stderr)
        self.assertRegex(r.stderr, r"data parallel: 2 ranks \(.*MPI.*; --dist-timeout 300 s\); "
                                   r"gradients all-reduced through host memory over MPI \(cpu "
                                   r"has no collectives of its own\)")
        la, lb, l2 = losses(accum), losses(big), losses(two)
        self.assertEqual(sorted(l2), list(range(1, 21)))  # rank 0 alone wrote metrics
        self.assertEqual(len(os.listdir(os.path.join(two, "tensorboard"))), 1)  # and events
        self.assert_curves_match(la, l2, range(1, 21))
        self.assert_curves_match(lb, l2, range(1, 21))
        # Weights against the process that sums the same two half-batch
        # gradients. Against the one-batch run the weights differ by more
        # than 1e-6 in one process already (batch 4 vs 2 x accumulation 2):
        # the key bias gets a gradient of pure rounding (softmax ignores it)
        # that Adam scales up to lr-sized steps.
        self.assert_weights_match(os.path.join(accum, "checkpoint-20"),
                                  os.path.join(two, "checkpoint-20"))
        with open(os.path.join(two, "checkpoint-20", "trainer_state.json")) as f:
            self.assertEqual(json.load(f)["world_size"], 2)

    def test_two_ranks_with_dropout_match_one_process(self):
        # Dropout masks are drawn by the micro-batch's index in the global
        # step (docs/design-notes.md, data parallel): replica r's are those
        # of micro-batch r of one process with accumulation 2, so the runs
        # match, and the two replicas' masks differ (were they the same,
        # the second half-batch would get the first's masks).
        steps = ["--max-steps", "8", "--batch-size", "2", "--save-every", "8", "--keep", "0"]
        drop = ["--dropout", "0.1"]
        accum, two, plain = self.path("accum"), self.path("two"), self.path("plain")
        self.train(*steps, *drop, "--out", accum, "--grad-accum", "2")
        self.train_mpi(2, *steps, *drop, "--out", two)
        self.train(*steps, "--out", plain, "--grad-accum", "2")
        la, l2, lp = losses(accum), losses(two), losses(plain)
        self.assert_curves_match(la, l2, range(1, 9))
        self.assert_weights_match(os.path.join(accum, "checkpoint-8"),
                                  os.path.join(two, "checkpoint-8"))
        # dropout was on: without it the curve is another one
        self.assertTrue(any(abs(la[s] - lp[s]) > 1e-4 * abs(la[s]) for s in range(1, 9)),
                        (la, lp))

    def test_ranks_with_accumulation(self):
        # 2 ranks x batch 1 x accumulation 2: the same global batch of 4 rows
        steps = ["--max-steps", "6"]
        big, two = self.path("big"), self.path("two")
        self.train(*steps, "--out", big, "--batch-size", "4")
        self.train_mpi(2, *steps, "--out", two, "--batch-size", "1", "--grad-accum", "2")
        self.assert_curves_match(losses(big), losses(two), range(1, 7))


class DataflowTest(Base):
    """A device that runs whole steps only (dataflow): the gradient
    all-reduce is an op inside its fused step, executed through the host's
    collectives (ABI 1.5)."""

    def test_two_ranks_match_one_process(self):
        steps = ["--max-steps", "8", "--save-every", "8", "--keep", "0"]
        one, cpu, two = self.path("one"), self.path("cpu"), self.path("two")
        df = ["--backend", "dataflow"]
        self.train(*steps, *df, "--out", one, "--batch-size", "4")
        self.train(*steps, "--out", cpu, "--batch-size", "4")
        r = self.train_mpi(2, *steps, *df, "--out", two, "--batch-size", "2")
        self.assertRegex(r.stderr, r"data parallel: 2 ranks \(.*; --dist-timeout 300 s\); "
                                   r"gradients all-reduced inside the fused step by all_reduce "
                                   r"ops, which dataflow runs through the host's collectives "
                                   r"\(ABI 1\.5\)")
        l1, lc, l2 = losses(one), losses(cpu), losses(two)
        self.assertEqual(sorted(l2), list(range(1, 9)))
        self.assert_curves_match(l1, l2, range(1, 9))
        self.assert_curves_match(lc, l2, range(1, 9))
        # Weights: the sum of two half-batch gradients differs from one
        # batch's by rounding, which Adam scales up to lr-sized steps where
        # the true gradient is ~0 (the key bias, DataParallelTest), so the
        # weights are compared under SGD, which keeps rounding rounding.
        sgd = ["--optimizer", "sgd"]
        one_sgd, two_sgd = self.path("one_sgd"), self.path("two_sgd")
        self.train(*steps, *df, *sgd, "--out", one_sgd, "--batch-size", "4")
        self.train_mpi(2, *steps, *df, *sgd, "--out", two_sgd, "--batch-size", "2")
        self.assert_curves_match(losses(one_sgd), losses(two_sgd), range(1, 9))
        self.assert_weights_match(os.path.join(one_sgd, "checkpoint-8"),
                                  os.path.join(two_sgd, "checkpoint-8"))

    def test_compare_one_process_against_two_ranks(self):
        out = self.path("cmp")
        r = subprocess.run([CFG.trainyard, "compare", "--model", self.gpt2, "--data", self.data,
                            "--lr", "2e-3", "--steps", "4", "--out", out, "--tolerance", "1e-6",
                            "--batch-size", "4", "--backends", "cpu,dataflow,dataflow*2"],
                           capture_output=True, text=True, env=rank_env(), timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("dataflow*2", r.stdout)
        with open(os.path.join(out, "compare.csv")) as f:
            self.assertIn("loss_dataflow_2", f.readline().strip().split(","))

    def test_artifact_for_two_ranks(self):
        def compile_step(out, *extra):
            return run(["compile", "--backend", "dataflow", "--model", self.gpt2, "--data",
                        self.data, "--batch-size", "2", "--cache-dir", "none", "--out", out]
                       + list(extra))

        dp2, dp1 = self.path("dp2.tyart"), self.path("dp1.tyart")
        r = compile_step(dp2, "--data-parallel", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("memory levers: data_parallel=2", r.stdout)
        self.assertIn("data parallel: 2 ranks (--data-parallel); gradients all-reduced inside "
                      "the step", r.stdout)
        r = compile_step(dp1)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("data parallel: no (one process)", r.stdout)
        # A 2-rank run from the artifact is the 2-rank run that compiles.
        base = ["train", "--model", self.gpt2, "--data", self.data, "--lr", "2e-3",
                "--backend", "dataflow", "--log-every", "100", "--max-steps", "4",
                "--batch-size", "2"]
        plain, art = self.path("plain"), self.path("art")
        self.train_mpi(2, "--max-steps", "4", "--backend", "dataflow", "--out", plain,
                       "--batch-size", "2")
        r = mpirun(2, base + ["--out", art, "--artifact", dp2])
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-3000:])
        self.assert_curves_match(losses(plain), losses(art), range(1, 5))
        # A run of another size is refused naming both.
        r = run(base + ["--out", self.path("one"), "--artifact", dp2])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("was compiled for 2 ranks (--data-parallel) and this run has 1 rank",
                      r.stderr)
        r = mpirun(2, base + ["--out", self.path("two"), "--artifact", dp1])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("was compiled for 1 rank (no --data-parallel) and this run has 2 ranks",
                      r.stderr)
        # Bad values.
        for value in ("0", "x", "-2", "70000", ""):
            r = compile_step(self.path("bad.tyart"), "--data-parallel", value)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("--data-parallel needs a number of ranks from 1 to 65536", r.stderr)
        r = compile_step(self.path("bad.tyart"), "--data-parallel", "2", "--inference")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--data-parallel with --inference", r.stderr)
        r = run(["compile", "--backend", "cpu", "--model", self.gpt2, "--data", self.data,
                 "--batch-size", "2", "--cache-dir", "none", "--data-parallel", "2",
                 "--out", self.path("cpu.tyart")])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--data-parallel 2: --backend cpu does not run whole steps", r.stderr)

    def test_refused(self):
        r = mpirun(2, ["train"] + self.common + ["--backend", "dataflow", "--out",
                                                 self.path("z"), "--max-steps", "2",
                                                 "--zero", "1"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--zero 1: --backend dataflow runs the whole step in one call", r.stderr)


class DeviceCollectivesTest(Base):
    """The core's device path: a backend with the ABI 1.4 collectives (the
    commfake test plugin does them with MPI on its buffers, as cuda does
    with NCCL) sums the gradients itself, in place on its buffers."""

    def test_backend_collectives_reduce_the_gradients(self):
        plugin = ["--plugin-path", CFG.commfake_dir]
        args = ["train"] + self.common + ["--backend", "commfake", "--max-steps", "6",
                                          "--batch-size", "2"]
        one, two = self.path("one"), self.path("two")
        r = run(plugin + args + ["--out", one, "--grad-accum", "2"])
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        # A backend with collectives and ABI 1.5 keeps one fused step, with
        # the gradients' all_reduce ops inside it (cuda: NCCL on its stream).
        r = mpirun(2, plugin + args + ["--out", two])
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-3000:])
        self.assertIn("gradients all-reduced on the devices by commfake's collectives, as "
                      "all_reduce ops inside the fused step (ABI 1.5)", r.stderr)
        self.assertIn("host staging of the gradient all-reduce none (on the device)", r.stderr)
        self.assert_curves_match(losses(one), losses(two), range(1, 7))
        self.assert_weights_match(os.path.join(one, "checkpoint-6"),
                                  os.path.join(two, "checkpoint-6"))
        # The split step (gradient graph, the backend's comm_all_reduce on
        # the accumulators, optimizer graph): what ZeRO-1 and accumulation
        # use, forced here to compare.
        split = self.path("split")
        r = mpirun(2, plugin + args + ["--out", split], env={"TRAINYARD_DEBUG_DIST_SPLIT": "1"})
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-3000:])
        self.assertIn("gradients all-reduced on the devices by commfake's collectives between "
                      "the gradient and optimizer graphs (ABI 1.4)", r.stderr)
        self.assert_curves_match(losses(one), losses(split), range(1, 7))
        self.assert_weights_match(os.path.join(one, "checkpoint-6"),
                                  os.path.join(split, "checkpoint-6"))
        r = run(plugin + ["check", "--backend", "commfake", "--model", self.gpt2, "--train"])
        self.assertIn("collectives: commfake has its own (ABI 1.4 comm_* entries)", r.stdout)
        # ZeRO-1 on the device path: the fused step updates this rank's share
        # (optimizer state for it alone), then each share is broadcast by the
        # backend's collective from its owner (cuda: ncclBroadcast).
        zero = self.path("zero")
        r = mpirun(2, plugin + args + ["--out", zero, "--zero", "1"])
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-3000:])
        self.assertIn("as all_reduce ops inside the fused step (ABI 1.5)", r.stderr)
        self.assertIn("data parallel, ZeRO-1): parameters 119.50 KiB", r.stderr)
        self.assert_curves_match(losses(two), losses(zero), range(1, 7))
        self.assert_weights_match(os.path.join(two, "checkpoint-6"),
                                  os.path.join(zero, "checkpoint-6"))


class CudaNcclTest(Base):
    """The cuda plugin without NCCL (registered by tests/cuda/emu on the
    CUDA CPU emulator, with TRAINYARD_CUDA_NCCL naming a missing file): a
    data-parallel run stops with the reason as soon as the devices are open,
    before any graph is built, on every rank."""

    def test_no_nccl_is_a_clear_error(self):
        if not os.environ.get("TRAINYARD_CUDA_DRIVER"):
            self.skipTest("needs the CUDA emulator (tests/cuda/emu registers this suite)")
        args = ["--backend", "cuda", "--max-steps", "2", "--batch-size", "2"]
        r = self.train_mpi(2, *args, "--out", self.path("two"), rc="fail")
        err = r.stdout + r.stderr
        self.assertIn("no NCCL (", err)
        self.assertIn("a multi-device run on cuda needs libnccl.so.2", err)
        self.assertIn("TRAINYARD_CUDA_NCCL", err)
        self.assertNotIn("memory plan", err)  # refused before the graphs are built

    def test_tensor_parallel_without_nccl(self):
        # --tp 2 (and --tp 2 --pp 2) on cuda make the tp group's device
        # communicator (ABI 1.7) with the devices: the same refusal, before
        # any graph is built
        if not os.environ.get("TRAINYARD_CUDA_DRIVER"):
            self.skipTest("needs the CUDA emulator (tests/cuda/emu registers this suite)")
        self.common[1] = os.path.join(CFG.models, "llama")
        args = ["--backend", "cuda", "--max-steps", "2", "--batch-size", "2"]
        for n, layout in ((2, ["--tp", "2"]), (4, ["--tp", "2", "--pp", "2"])):
            r = self.train_mpi(n, *args, *layout, "--out", self.path("tp%d" % n), rc="fail")
            err = r.stdout + r.stderr
            self.assertIn("the id of the 'tp' group's communicator", err)
            self.assertIn("a multi-device run on cuda needs libnccl.so.2", err)
            self.assertNotIn("memory plan", err)
            self.assertNotIn("step 1", err)


class ControlTest(Base):
    """`trainyard control` reaches every rank: rank 0 serves the socket and
    its requests are broadcast at the step boundary, so every rank saves,
    stops or aborts after the same step (the checkpoints of a ZeRO-1 run have
    a part from each rank, so a save on rank 0 alone would not load)."""

    def start(self, out, registry):
        env = {"TRAINYARD_DEBUG_STEP_SLEEP_MS": "100"}
        log = open(out + ".log", "w+")
        p = subprocess.Popen(MPIRUN + ["-np", "2", CFG.trainyard, "train"] + self.common +
                             ["--max-steps", "2000", "--batch-size", "2", "--zero", "1",
                              "--out", out, "--control-registry", registry],
                             stdout=log, stderr=log, text=True, env=rank_env(env))
        p.log = log
        self.addCleanup(self.stop, p)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            self.assertIsNone(p.poll(), self.output(p)[-3000:])
            r = run(["control", "list", "--json", "--registry", registry])
            live = json.loads(r.stdout or "{}").get("runs", []) if r.returncode == 0 else []
            if live and live[0]["step"] >= 1:
                return p
            time.sleep(0.2)
        self.fail("the run never showed up in control list:\n" + self.output(p)[-3000:])

    @staticmethod
    def output(p):
        p.log.seek(0)
        return p.log.read()

    @staticmethod
    def stop(p):
        if p.poll() is None:
            p.kill()
            p.wait()
        p.log.close()

    def checkpoints(self, out):
        return sorted(int(n.split("-")[1]) for n in os.listdir(out)
                      if re.fullmatch(r"checkpoint-\d+", n))

    def control(self, *args):
        r = run(["control"] + list(args) + ["--json"])
        self.assertEqual(r.returncode, 0, (args, r.stdout[-2000:], r.stderr[-2000:]))
        return json.loads(r.stdout)

    def test_save_and_stop_reach_every_rank(self):
        registry, out = self.path("reg"), self.path("run")
        p = self.start(out, registry)
        saved = self.control("save", out, "--registry", registry)
        self.assertTrue(saved["ok"], saved)
        # a whole ZeRO-1 checkpoint: both ranks' optimizer shards and the index
        ckpt = saved["checkpoint"]
        self.assertEqual(ckpt, os.path.join(out, "checkpoint-%d" % saved["step"]))
        names = set(os.listdir(ckpt))
        self.assertLessEqual({"optimizer-00001-of-00002.safetensors",
                              "optimizer-00002-of-00002.safetensors",
                              "optimizer.safetensors.index.json", "model.safetensors"}, names)
        stopped = self.control("stop", out, "--registry", registry)
        self.assertTrue(stopped["ok"], stopped)
        self.assertEqual(p.wait(timeout=120), 0, self.output(p)[-3000:])
        log = self.output(p)
        self.assertIn("stop requested by 'trainyard control'", log)
        self.assertIn(stopped["step"], self.checkpoints(out))
        self.assertGreaterEqual(stopped["step"], saved["step"])
        self.assertEqual(os.listdir(registry), [])

    def test_abort_ends_every_rank_without_a_checkpoint(self):
        registry, out = self.path("reg"), self.path("run")
        p = self.start(out, registry)
        saved = self.control("save", out, "--registry", registry)
        time.sleep(0.5)
        aborted = self.control("abort", out, "--registry", registry)
        self.assertTrue(aborted["ok"], aborted)
        self.assertNotEqual(p.wait(timeout=120), 0)
        log = self.output(p)
        self.assertIn("aborted by 'trainyard control abort'", log)
        self.assertNotIn("MPI_ABORT", log)  # every rank ended by itself
        self.assertEqual(self.checkpoints(out), [saved["step"]])


class ResumeTest(Base):
    def test_resume_across_world_sizes(self):
        args, one, ref, want = self.reference()
        # 2 ranks for 10 steps, then 1 rank for 10 more
        a = self.path("a")
        self.train_mpi(2, *args, "--max-steps", "10", "--out", a, "--batch-size", "2")
        r = self.train(*args, "--max-steps", "20", "--out", a, *one, "--resume", "latest")
        self.assertIn("is now split as 1 ranks x 2 x 2 (was 2 x 2 x 1)", r.stderr)
        self.assert_curves_match(want, losses(a), range(1, 21))
        self.assert_weights_match(os.path.join(ref, "checkpoint-20"),
                                  os.path.join(a, "checkpoint-20"))
        # 1 rank for 10 steps, then 2 ranks for 10 more
        b = self.path("b")
        self.train(*args, "--max-steps", "10", "--out", b, *one)
        self.train_mpi(2, *args, "--max-steps", "20", "--out", b, "--batch-size", "2",
                       "--resume", "latest")
        self.assert_curves_match(want, losses(b), range(1, 21))
        self.assert_weights_match(os.path.join(ref, "checkpoint-20"),
                                  os.path.join(b, "checkpoint-20"))


class ZeroTest(Base):
    def test_zero_matches_plain_data_parallel(self):
        args = ["--max-steps", "20", "--batch-size", "2", "--save-every", "10", "--keep", "0"]
        plain, zero = self.path("plain"), self.path("zero")
        self.train_mpi(2, *args, "--out", plain)
        r = self.train_mpi(2, *args, "--out", zero, "--zero", "1")
        # the plan counts rank 0's share of the optimizer state: about half
        self.assertIn("per rank (2 ranks, data parallel, ZeRO-1)", r.stderr)
        self.assert_curves_match(losses(plain), losses(zero), range(1, 21))
        ckpt = os.path.join(zero, "checkpoint-20")
        self.assert_weights_match(os.path.join(plain, "checkpoint-20"), ckpt)
        # one shard per rank and an index naming, for every state, its shard
        _, merged = read_zero_shards(self, ckpt, 2, 2)
        # together they are plain data parallel's optimizer state
        want = read_f32_safetensors(os.path.join(plain, "checkpoint-20", "optimizer.safetensors"))
        self.assertEqual(sorted(merged), sorted(want))
        for name in want:
            self.assertLessEqual(max(abs(x - y) for x, y in zip(merged[name], want[name])), 1e-6)
        # `ckpt merge` makes the one file of plain data parallel
        r = run(["ckpt", "merge", ckpt])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(os.listdir(ckpt)), ["config.json", "model.safetensors",
                                                    "optimizer.safetensors",
                                                    "trainer_state.json"])
        self.assertEqual(read_f32_safetensors(os.path.join(ckpt, "optimizer.safetensors")), merged)

    def test_resume_reshards(self):
        args, one, ref, want = self.reference()
        # sharded on 2 ranks, resumed on 1 (plain), and back on 2 (ZeRO-1)
        a = self.path("a")
        self.train_mpi(2, *args, "--max-steps", "10", "--out", a, "--batch-size", "2",
                       "--zero", "1")
        self.train(*args, "--max-steps", "15", "--out", a, *one, "--resume", "latest",
                   "--save-every", "5")
        self.train_mpi(2, *args, "--max-steps", "20", "--out", a, "--batch-size", "2",
                       "--zero", "1", "--resume", "latest")
        self.assert_curves_match(want, losses(a), range(1, 21))
        self.assert_weights_match(os.path.join(ref, "checkpoint-20"),
                                  os.path.join(a, "checkpoint-20"))


class Zero2Test(Base):
    def test_zero2_matches_plain_data_parallel_and_reshards(self):
        # ZeRO-2 on 2 ranks with accumulation (the split step): each gradient
        # summed by an all_reduce op of the gradient graph as backward
        # completes it, kept by its owner alone; the same curve and weights
        # as one process (the sums' order differs: f32 rounding), the
        # accumulators of the plan halved, ZeRO-1's checkpoint format
        args, one, ref, want = self.reference()
        two = ["--batch-size", "1", "--grad-accum", "2"]
        z2 = self.path("z2")
        r = self.train_mpi(2, *args, *two, "--max-steps", "20", "--out", z2, "--zero", "2")
        self.assertIn("each by an all_reduce op of the gradient graph as backward completes it "
                      "(ZeRO-2: kept by its owner alone)", r.stderr)
        self.assertIn("host staging of the gradient all-reduce none (summed in the gradient "
                      "graph)", r.stderr)
        m = re.search(r"per rank \(2 ranks, data parallel, ZeRO-2\): parameters ([\d.]+) KiB, "
                      r"gradients ([\d.]+) KiB \(rank 0's share\)", r.stderr)
        self.assertTrue(m, r.stderr[-3000:])
        # every f32 accumulator would be as large as the f32 parameters;
        # rank 0 holds about half of them (and one gradient in flight)
        self.assertLess(float(m.group(2)), 0.8 * float(m.group(1)))
        # (the curve only: the sums run in another order, and the key
        # bias's gradient, zero in exact arithmetic, is rounding noise that
        # AdamW turns into lr-sized steps of either sign)
        self.assert_curves_match(want, losses(z2), range(1, 21), rel=1e-5)
        read_zero_shards(self, os.path.join(z2, "checkpoint-20"), 2, 2)
        # without accumulation each sum is the one process's (row 0 + row
        # 1): sharded on 2 ranks, resumed as one process, and back on 2,
        # the same weights but the key bias (the clip's scale is computed
        # from the shares' sums of squares, so its noise differs)
        a = self.path("a")
        self.train_mpi(2, *args, "--batch-size", "2", "--max-steps", "10", "--out", a,
                       "--zero", "2")
        self.train(*args, "--max-steps", "15", "--out", a, *one, "--resume", "latest",
                   "--save-every", "5")
        self.train_mpi(2, *args, "--batch-size", "2", "--max-steps", "20", "--out", a,
                       "--zero", "2", "--resume", "latest")
        self.assert_curves_match(want, losses(a), range(1, 21))
        self.assert_weights_match(os.path.join(ref, "checkpoint-20"),
                                  os.path.join(a, "checkpoint-20"), key_bias=False)


class CkptTest(Base):
    def test_split_and_merge(self):
        args = ["--schedule", "constant", "--save-every", "10", "--keep", "0",
                "--batch-size", "2", "--grad-accum", "2"]
        ref, a = self.path("ref"), self.path("a")
        self.train(*args, "--max-steps", "20", "--out", ref)
        self.train(*args, "--max-steps", "10", "--out", a)
        ckpt = os.path.join(a, "checkpoint-10")
        whole = read_f32_safetensors(os.path.join(ckpt, "optimizer.safetensors"))
        r = run(["ckpt", "split", ckpt, "--ranks", "3"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("into 3 shards", r.stdout)
        self.assertFalse(os.path.exists(os.path.join(ckpt, "optimizer.safetensors")))
        parts = {}
        for k in range(1, 4):
            part = read_f32_safetensors(
                os.path.join(ckpt, "optimizer-%05d-of-00003.safetensors" % k))
            self.assertTrue(part)
            parts.update(part)
        self.assertEqual(parts, whole)
        # a split checkpoint resumes as the whole one would
        self.train(*args, "--max-steps", "20", "--out", a, "--resume", "latest")
        self.assert_curves_match(losses(ref), losses(a), range(1, 21))
        self.assert_weights_match(os.path.join(ref, "checkpoint-20"),
                                  os.path.join(a, "checkpoint-20"))
        r = run(["ckpt", "merge", ckpt])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(read_f32_safetensors(os.path.join(ckpt, "optimizer.safetensors")), whole)
        for args, rc, text in (
                (["merge", ckpt], 1, "the optimizer state is one file already"),
                (["split", ckpt], 2, "split needs --ranks N"),
                (["split", ckpt, "--ranks", "1"], 2, "--ranks must be a number from 2"),
                (["merge", ckpt, "--ranks", "2"], 2, "--ranks is for 'ckpt split'"),
                (["merge"], 2, "give one checkpoint folder"),
                (["squash", ckpt], 2, "expected 'merge', 'split' or 'diff'"),
                (["merge", self.path("nowhere")], 1, "cannot open checkpoint folder")):
            r = run(["ckpt"] + args)
            self.assertEqual(r.returncode, rc, (args, r.stderr))
            self.assertIn(text, r.stderr)


class CompareTest(Base):
    def test_one_rank_against_two(self):
        out = self.path("cmp")
        args = ["compare", "--model", self.gpt2, "--data", self.data, "--lr", "2e-3",
                "--steps", "5", "--out", out, "--tolerance", "1e-6", "--batch-size", "4"]
        r = subprocess.run([CFG.trainyard] + args + ["--backends", BACKEND + "," + BACKEND + "*2"],
                           capture_output=True, text=True, env=rank_env(), timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("cpu?threads=1*2", r.stdout)
        with open(os.path.join(out, "compare.csv")) as f:
            header = f.readline().strip().split(",")
        self.assertIn("loss_cpu_threads_1_2", header)
        # each rank took half of every batch: the same global batch of 4
        with open(os.path.join(out, "2-cpu_threads_1_2", "train.cfg")) as f:
            self.assertIn("batch_size = 2\n", f.read())
        with open(os.path.join(out, "2-cpu_threads_1_2", "train.log")) as f:
            self.assertIn("per rank (2 ranks, data parallel", f.read())
        for item, text in (("cpu*1", "URI*N needs a number of ranks N from 2"),
                           ("cpu*x", "URI*N needs a number of ranks N from 2"),
                           ("cpu*3", "--batch-size 4 is not a multiple of 3")):
            r = subprocess.run([CFG.trainyard] + args + ["--overwrite", "--backends",
                                                         "cpu," + item],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(text, r.stderr)


class FailureTest(Base):
    def check_previous_checkpoint(self, out):
        names = sorted(os.listdir(out))
        self.assertIn("checkpoint-2", names)
        self.assertFalse([n for n in names if n.startswith(".checkpoint-")], names)  # no half save
        # whole and resumable: one more step on one process
        self.train("--max-steps", "3", "--out", self.path("again"), "--batch-size", "4",
                   "--resume", os.path.join(out, "checkpoint-2"))

    def test_sigterm_to_one_rank_stops_every_rank(self):
        out = self.path("out")
        args = (MPIRUN + ["-np", "2", CFG.trainyard, "train"] + self.common +
                ["--max-steps", "200", "--batch-size", "2", "--out", out])
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=rank_env({"TRAINYARD_DEBUG_STEP_SLEEP_MS": "100"}))
        rank1 = None
        deadline = time.monotonic() + 60
        while rank1 is None and time.monotonic() < deadline:
            time.sleep(0.2)
            rank1 = find_rank(p.pid, 1)
        self.assertIsNotNone(rank1, "rank 1 never started")
        while not os.path.exists(os.path.join(out, "metrics.jsonl")):
            time.sleep(0.1)
        time.sleep(1.0)
        os.kill(rank1, signal.SIGTERM)  # rank 1 alone
        stdout, stderr = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, stderr[-3000:])
        m = re.search(r"SIGTERM received after step (\d+): saving and stopping", stderr)
        self.assertIsNotNone(m, stderr[-3000:])
        step = int(m.group(1))
        self.assertLess(step, 200)
        # one checkpoint of that step, whole, from the step both ranks agreed on
        with open(os.path.join(out, "checkpoint-%d" % step, "trainer_state.json")) as f:
            self.assertEqual(json.load(f)["step"], step)
        self.assertEqual(sorted(losses(out)), list(range(1, step + 1)))

    def run_with_fault(self, out, mode, timeout):
        """2 ranks, a checkpoint every 2 steps, rank 1 failing at step 3;
        (the result, its seconds)."""
        began = time.monotonic()
        r = self.train_mpi(2, "--max-steps", "8", "--save-every", "2", "--out", out,
                           "--batch-size", "2", "--dist-timeout", str(timeout), rc="fail",
                           env={"TRAINYARD_DEBUG_DIST_FAULT": "1:3:" + mode})
        return r, time.monotonic() - began

    def test_hung_rank_is_named(self):
        out = self.path("out")
        r, elapsed = self.run_with_fault(out, "hang", 4)
        # named with its host (MPI_Get_processor_name, gathered at start-up)
        self.assertRegex(r.stderr, r"rank 1 on host \S+ did not reach")
        self.assertIn("within 4 s (--dist-timeout)", r.stderr)
        self.assertLess(elapsed, 60)
        self.check_previous_checkpoint(out)

    def test_killed_rank_ends_the_run(self):
        out = self.path("out")
        r, elapsed = self.run_with_fault(out, "kill", 20)
        self.assertLess(elapsed, 60)
        # Open MPI's launcher names the rank that died and ends the others
        self.assertRegex(r.stdout + r.stderr, r"rank 1 .*signal 9")
        self.check_previous_checkpoint(out)


class RefuseTest(Base):
    def refused(self, rc, args, text, env=None, ranks=0):
        r = (self.train_mpi(ranks, *args, rc="fail", env=env) if ranks
             else self.train(*args, rc=rc, env=env))
        self.assertIn(text, r.stderr)
        return r

    def test_zero2_on_a_device_without_all_reduce(self):
        # opencl has no kernel for all_reduce: ZeRO-2's gradient graph is
        # refused, and the error says why that graph has all_reduce ops
        r = mpirun(2, ["train", "--model", self.gpt2, "--data", self.data, "--backend", "opencl",
                       "--max-steps", "1", "--batch-size", "2", "--zero", "2",
                       "--out", self.path("ocl"), "--cache-dir", self.path("cache")])
        if "has no kernel for op 'all_reduce'" not in r.stderr and "opencl" in r.stderr and (
                "UNAVAILABLE" in r.stderr or "NOT_FOUND" in r.stderr):
            self.skipTest("no usable opencl device: " + r.stderr.strip()[-300:])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--zero 2 on 2 ranks sums each gradient inside the gradient graph with "
                      "all_reduce ops (--zero 1 sums them between the graphs)", r.stderr)
        self.assertIn("opencl has no kernel for op 'all_reduce'", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.path("ocl"), "checkpoint-1")))

    def test_bad_inputs(self):
        out = ["--out", self.path("out"), "--max-steps", "2"]
        # MPI asked for but not loadable (as in a build without MPI)
        self.refused(1, out + ["--distributed", "mpi"], "cannot load the MPI shim",
                     env={"TRAINYARD_MPI_SHIM": self.path("missing/libty_mpi.so")})
        self.refused(2, out + ["--dist-timeout", "0"], "--dist-timeout must lie in (0, 604800]")
        self.refused(2, out + ["--distributed", "nccl"],
                     "--distributed must be auto, mpi, env or none, not 'nccl'")
        self.refused(2, out + ["--distributed", "none", "--dist-timeout", "9"],
                     "--dist-timeout has no effect with --distributed none")
        r = self.refused(None, out + ["--fused-optimizer"], "cannot run data parallel", ranks=2)
        self.assertIn("rank 1: trainyard train: INVALID_ARGUMENT", r.stderr)
        self.refused(None, ["--out", self.path("o2"), "--max-steps", "2", "--backend",
                            "cpu?fallback=dataflow"], "not data parallel", ranks=2)
        self.refused(None, ["--out", self.path("o3"), "--max-steps", "2", "--backend", "cpu",
                            "--fallback", "dataflow"],
                     "--fallback dataflow: a mixed run is for bring-up on one process, not data "
                     "parallel", ranks=2)
        # ZeRO-1 shards over ranks: one process has none to shard over
        self.refused(1, out + ["--zero", "1"], "--zero 1 shards the optimizer state over the "
                     "ranks of a distributed run, and this run is one process")
        self.refused(2, out + ["--zero", "3"], "--zero must be 0, 1 or 2, not 3")
        self.refused(1, out + ["--zero", "2"], "--zero 2 shards the optimizer state over the "
                     "ranks of a distributed run, and this run is one process")
        self.refused(2, out + ["--distributed", "none", "--zero", "1"],
                     "--zero 1 has no effect with --distributed none")
        # an artifact is one device's whole step
        art = self.path("step.tyart")
        r = run(["compile", "--backend", "dataflow", "--model", self.gpt2, "--data", self.data,
                 "--batch-size", "2", "--out", art])
        self.assertEqual(r.returncode, 0, r.stderr)
        r = mpirun(2, ["train", "--model", self.gpt2, "--data", self.data, "--out",
                       self.path("o4"), "--max-steps", "2", "--backend", "dataflow",
                       "--artifact", art, "--batch-size", "2"])  # no --cache-dir with it
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("was compiled for 1 rank (no --data-parallel) and this run has 2 ranks",
                      r.stderr)
        # a single process never loads MPI (the dynamic linker's log)
        r = self.train("--out", self.path("single"), "--max-steps", "1",
                       env={"LD_DEBUG": "files"})
        self.assertIn("libty_backend_cpu", r.stderr)  # the log is there
        self.assertNotIn("libmpi", r.stderr)
        self.assertNotIn("libty_mpi", r.stderr)
        # one process under mpirun that opts out is an ordinary run
        self.train_mpi(1, *out, "--distributed", "none")
        # a resume must keep ranks x batch x accumulation
        self.train_mpi(2, "--out", self.path("g"), "--max-steps", "2", "--batch-size", "2")
        self.refused(1, ["--out", self.path("g"), "--max-steps", "4", "--batch-size", "2",
                         "--resume", "latest"], "cannot resume: the global batch was 4 rows")


def mpi_missing(cfg):
    """Why these suites cannot run here (mpirun or the MPI shim missing), or
    None."""
    if not shutil.which("mpirun"):
        return "mpirun is not installed (scripts/install-deps.sh installs openmpi-bin)"
    if not os.path.exists(cfg.mpi_shim):
        return "%s was not built (this build found no MPI; install libopenmpi-dev)" % \
            cfg.mpi_shim
    return None


def run_suites(rest):
    """unittest.main over `rest` (the suites): 77 (skipped, saying why)
    without MPI, else 0 or 1."""
    missing = mpi_missing(CFG)
    if missing:
        print("SKIPPED: " + missing)
        return 77
    program = unittest.main(argv=[sys.argv[0], "-v"] + rest, exit=False)
    return unittest_exit.exit_code(program.result)


def main():
    global CFG
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--models", required=True, help="tests/fixtures/models")
    parser.add_argument("--mpi-shim", required=True, help="the build's libty_mpi.so")
    parser.add_argument("--commfake-dir", required=True,
                        help="the commfake test plugin's folder (tests/plugins)")
    CFG, rest = parser.parse_known_args()
    cli_util.CFG = CFG  # its dataset maker runs CFG.trainyard
    return run_suites(rest)


if __name__ == "__main__":
    sys.exit(main())
