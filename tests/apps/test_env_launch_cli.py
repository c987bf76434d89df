#!/usr/bin/env python3
"""The launch without MPI (issue 36): `trainyard train` ranks started as
plain processes with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT) and TRAINYARD_JOB_TOKEN, meeting at a TCP
rendezvous on 127.0.0.1 (a free port) and talking over the Trainyard TCP
transport (distributed/tcp_world.c). Standard library only; no MPI needed.

- MatchTest: 2 ranks x batch 2 equal one process with --grad-accum 2 within
  1e-6 over 10 steps (losses and weights); --tp 2, --pp 2 (within 1e-5, as
  under mpirun) and --zero 1 each once against one process; `--distributed
  auto` picks the environment; srun's variables with TRAINYARD_RENDEZVOUS;
  WORLD_SIZE=1 is one process.
- RefuseTest: a missing variable (named, every rank exits non-zero), a
  wrong job token ("refused this rank: its TRAINYARD_JOB_TOKEN differs"), a
  second rank claiming the same RANK, WORLD_SIZE differing between ranks,
  a rank that never arrives, rank 0 that never comes: each rank ends
  within --dist-timeout + 10 s with the message.
- FaultTest: a rank killed by SIGKILL mid-run: the other stops within
  --dist-timeout + 10 s naming it and its host, the previous checkpoint
  stays whole and `--resume` on 1 rank continues from it.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
import unittest

import cli_util
import test_distributed_cli as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import env_launch  # noqa: E402
import unittest_exit  # noqa: E402

CFG = None


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ty_env_launch_")
        self.data = cli_util.make_ids_dataset(os.path.join(self.tmp, "data"), docs=80)
        self.common = ["--model", os.path.join(CFG.models, "gpt2"), "--data", self.data,
                       "--lr", "2e-3", "--backend", dist.BACKEND, "--log-every", "100",
                       "--cache-dir", os.path.join(self.tmp, "cache")]

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def train(self, *args):
        r = dist.run(["train"] + self.common + list(args))
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        return r

    def launch(self, n, *args, per_rank=None, timeout=240):
        """`n` ranks of `trainyard train`; their [Rank]."""
        # LeakSanitizer stays on (no MPI in these ranks: test_distributed_cli.py
        # turns it off for Open MPI's leftovers only).
        return env_launch.launch([CFG.trainyard, "train"] + self.common + list(args), n,
                                 per_rank=per_rank, timeout=timeout)

    def all_ok(self, ranks):
        for r in ranks:
            self.assertEqual(r.returncode, 0, "rank %d:\n%s" % (r.rank, r.stderr[-3000:]))

    def all_fail(self, ranks, text, within):
        """Every rank exited non-zero within `within` s, saying `text`."""
        for r in ranks:
            self.assertIsNotNone(r.returncode, "rank %d still ran:\n%s" % (r.rank, r.stderr))
            self.assertNotEqual(r.returncode, 0, "rank %d:\n%s" % (r.rank, r.stderr[-3000:]))
            self.assertIn(text, r.stderr, "rank %d" % r.rank)
            self.assertLess(r.seconds, within, "rank %d" % r.rank)


class MatchTest(Base):
    def test_data_parallel_matches_one_process(self):
        steps = ["--max-steps", "10", "--batch-size", "2", "--save-every", "10", "--keep", "0"]
        one, two = self.path("one"), self.path("two")
        self.train(*steps, "--out", one, "--grad-accum", "2")
        ranks = self.launch(2, *steps, "--out", two, "--distributed", "env")
        self.all_ok(ranks)
        err = ranks[0].stderr
        self.assertRegex(err, r"data parallel: 2 ranks \(Trainyard TCP transport \(rendezvous "
                              r"127\.0\.0\.1:\d+\); --dist-timeout 300 s\); gradients "
                              r"all-reduced through host memory over the Trainyard TCP "
                              r"transport \(rendezvous 127\.0\.0\.1:\d+\)")
        l1, l2 = dist.losses(one), dist.losses(two)
        self.assertEqual(sorted(l2), list(range(1, 11)))
        Helper.assert_curves(self, l1, l2, range(1, 11), 1e-6)
        Helper.assert_weights(self, os.path.join(one, "checkpoint-10"),
                              os.path.join(two, "checkpoint-10"))

    def test_slurm_variables(self):
        # srun's variables and TRAINYARD_RENDEZVOUS, picked by auto
        steps = ["--max-steps", "4", "--batch-size", "2"]
        one, two = self.path("one"), self.path("two")
        self.train(*steps, "--out", one, "--grad-accum", "2")
        port = env_launch.free_port()

        def slurm(r):
            return {"RANK": None, "WORLD_SIZE": None, "LOCAL_RANK": None, "MASTER_ADDR": None,
                    "MASTER_PORT": None, "SLURM_PROCID": str(r), "SLURM_NTASKS": "2",
                    "SLURM_LOCALID": str(r), "TRAINYARD_RENDEZVOUS": "127.0.0.1:%d" % port}
        ranks = self.launch(2, *steps, "--out", two, per_rank=slurm)
        self.all_ok(ranks)
        self.assertIn("rendezvous 127.0.0.1:%d" % port, ranks[0].stderr)
        Helper.assert_curves(self, dist.losses(one), dist.losses(two), range(1, 5), 1e-6)

    def test_world_of_one(self):
        # WORLD_SIZE=1 is one process: no rendezvous, no token needed
        ranks = self.launch(1, "--max-steps", "2", "--out", self.path("one"),
                            per_rank=lambda r: {"TRAINYARD_JOB_TOKEN": None,
                                                "MASTER_ADDR": None, "MASTER_PORT": None})
        self.all_ok(ranks)
        self.assertNotIn("data parallel:", ranks[0].stderr)
        self.assertEqual(sorted(dist.losses(self.path("one"))), [1, 2])

    def check_layout(self, extra, rel, one_args=()):
        steps = ["--max-steps", "6", "--batch-size", "2", "--schedule", "constant"]
        one, two = self.path("one"), self.path("two")
        self.train(*steps, *one_args, "--out", one)
        # auto: no MPI launcher variable, RANK and WORLD_SIZE set
        ranks = self.launch(2, *steps, *extra, "--out", two)
        self.all_ok(ranks)
        Helper.assert_curves(self, dist.losses(one), dist.losses(two), range(1, 7), rel)
        return ranks

    def test_tensor_parallel(self):
        ranks = self.check_layout(["--tp", "2"], 1e-5)
        self.assertIn("tensor parallel: 2 ranks = dp 1 x pp 1 x tp 2 x cp 1 (Trainyard TCP transport",
                      ranks[0].stderr)

    def test_pipeline_parallel(self):
        ranks = self.check_layout(["--pp", "2"], 1e-5)
        self.assertIn("between stages: point to point over the Trainyard TCP transport",
                      ranks[0].stderr)

    def test_zero(self):
        self.check_layout(["--zero", "1"], 1e-6, one_args=("--grad-accum", "2"))


class Helper:
    @staticmethod
    def assert_curves(test, a, b, steps, rel):
        for s in steps:
            test.assertIn(s, a)
            test.assertIn(s, b)
            test.assertLessEqual(abs(a[s] - b[s]), rel * abs(a[s]), "step %d: %r vs %r"
                                 % (s, a[s], b[s]))

    @staticmethod
    def assert_weights(test, ckpt_a, ckpt_b, tol=1e-6):
        wa = dist.read_f32_safetensors(os.path.join(ckpt_a, "model.safetensors"))
        wb = dist.read_f32_safetensors(os.path.join(ckpt_b, "model.safetensors"))
        test.assertEqual(sorted(wa), sorted(wb))
        for name in wa:
            worst = max(abs(x - y) for x, y in zip(wa[name], wb[name]))
            test.assertLessEqual(worst, tol, name)


TIMEOUT = 4  # --dist-timeout of the refusals and faults


class RefuseTest(Base):
    def refused(self, text, per_rank, n=2, within=TIMEOUT + 10):
        ranks = self.launch(n, "--max-steps", "2", "--out", self.path("out"),
                            "--dist-timeout", str(TIMEOUT), per_rank=per_rank, timeout=60)
        self.all_fail(ranks, text, within)
        return ranks

    def test_missing_variable(self):
        self.refused("MASTER_PORT is not set", lambda r: {"MASTER_PORT": None})
        self.refused("LOCAL_RANK is not set", lambda r: {"LOCAL_RANK": None})
        ranks = self.refused("TRAINYARD_JOB_TOKEN is not set",
                             lambda r: {"TRAINYARD_JOB_TOKEN": None})
        # --distributed auto: the variable that asked is named
        self.assertIn("RANK asks for a distributed run", ranks[0].stderr)
        self.refused("TRAINYARD_JOB_TOKEN has 5 characters: it needs 16",
                     lambda r: {"TRAINYARD_JOB_TOKEN": "short"})
        self.refused("RANK=2 is not a rank of a job of WORLD_SIZE=2 ranks",
                     lambda r: {"RANK": "2"})

    def test_wrong_token(self):
        # rank 1's token differs: it is refused; rank 0 keeps waiting for
        # the right rank 1, which never comes.
        ranks = self.launch(2, "--max-steps", "2", "--out", self.path("out"),
                            "--dist-timeout", str(TIMEOUT), timeout=60,
                            per_rank=lambda r: ({"TRAINYARD_JOB_TOKEN": "another-token-0123456789"}
                                                if r == 1 else {}))
        self.all_fail(ranks[1:], "refused this rank: its TRAINYARD_JOB_TOKEN differs",
                      TIMEOUT + 10)
        self.assertNotIn("another-token", ranks[1].stderr)  # never printed
        self.all_fail(ranks[:1], "rank 1 never arrived at the rendezvous 127.0.0.1:",
                      TIMEOUT + 10)

    def test_duplicate_rank(self):
        ranks = self.refused("rank 1 is claimed twice: by host",
                             lambda r: {"RANK": "1", "LOCAL_RANK": "1"} if r == 2 else {}, n=3)
        self.assertIn("every rank of one job needs its own RANK", ranks[0].stderr)

    def test_world_size_mismatch(self):
        self.refused("WORLD_SIZE differs between ranks: rank 0 on host",
                     lambda r: {"WORLD_SIZE": "3"} if r == 1 else {})

    def test_rank_never_arrives(self):
        # 3 ranks expected, 2 started
        ranks = self.refused("rank 2 never arrived at the rendezvous 127.0.0.1:",
                             lambda r: {"WORLD_SIZE": "3"})
        self.assertIn("within %d s (ranks 0,1 did)" % TIMEOUT, ranks[1].stderr)


    def test_rank_zero_never_comes(self):
        # rank 1 of 2 alone: it retries until --dist-timeout, then says where
        ranks = self.refused("cannot reach rank 0's rendezvous at 127.0.0.1:",
                             lambda r: {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, n=1)
        self.assertGreater(ranks[0].seconds, TIMEOUT - 0.5)  # it did retry
        self.assertIn("within %d s: start rank 0 with the same MASTER_ADDR/MASTER_PORT"
                      % TIMEOUT, ranks[0].stderr)


class FaultTest(Base):
    def test_killed_rank(self):
        out = self.path("out")
        began = time.monotonic()
        ranks = self.launch(2, "--max-steps", "8", "--save-every", "2", "--out", out,
                            "--batch-size", "2", "--dist-timeout", "20", timeout=120,
                            per_rank=lambda r: {"TRAINYARD_DEBUG_DIST_FAULT": "1:3:kill"})
        elapsed = time.monotonic() - began
        self.assertEqual(ranks[1].returncode, -9, ranks[1].stderr[-2000:])
        self.assertNotEqual(ranks[0].returncode, 0, ranks[0].stderr[-2000:])
        self.assertLess(elapsed, 20 + 10)
        self.assertRegex(ranks[0].stderr, r"rank 1 \(host [^,]+, 127\.0\.0\.1\) closed its "
                                          r"connection")
        names = sorted(os.listdir(out))
        self.assertIn("checkpoint-2", names)
        self.assertNotIn("checkpoint-4", names)
        self.assertFalse([n for n in names if n.startswith(".checkpoint-")], names)
        # whole and resumable on 1 rank: it continues from step 2
        again = self.path("again")
        r = dist.run(["train"] + self.common + ["--max-steps", "4", "--batch-size", "4",
                                                "--out", again, "--resume",
                                                os.path.join(out, "checkpoint-2")])
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertEqual(sorted(dist.losses(again)), [3, 4])


def main():
    global CFG
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--models", required=True, help="tests/fixtures/models")
    CFG, rest = parser.parse_known_args()
    CFG.mpi_shim = ""
    cli_util.CFG = CFG
    dist.CFG = CFG
    program = unittest.main(argv=[sys.argv[0], "-v"] + rest, exit=False)
    return unittest_exit.exit_code(program.result)


if __name__ == "__main__":
    sys.exit(main())
