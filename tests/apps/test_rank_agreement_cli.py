#!/usr/bin/env python3
"""Ranks of one job that disagree (issue 33), under Open MPI's mpirun on the
cpu backend (Python standard library only).

- AgreeTest: ranks started (MPMD: `mpirun -np 1 A : -np 1 B`) with
  different models (the GPT-2 fixture against the Llama one) or with one
  option different (--lr, --batch-size, --dtype, --seed, --out,
  --max-steps, --zero) stop before their first collective, every rank with
  the same message naming the field, the rank that differs and both values,
  exit 1, no "its error is above" without an error above, no MPI error;
  ranks whose paths differ but hold the same model and data, and whose
  compile caches differ, train to the end; a rank that never reaches the
  start-up agreement (a fault-injection hook) is named by the others within
  --dist-timeout, rank 0 as well as rank 1.

Without mpirun or the MPI shim the suite exits 77 (skipped) and says why.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import cli_util
import test_distributed_cli as dist

CFG = None


def mpmd(first, second, env=None, timeout=300):
    """rank 0 runs `trainyard first...`, rank 1 `trainyard second...`."""
    cmd = (dist.MPIRUN + ["-np", "1", CFG.trainyard] + first + [":", "-np", "1", CFG.trainyard] +
           second)
    return subprocess.run(cmd, capture_output=True, text=True, env=dist.rank_env(env),
                          timeout=timeout)


class AgreeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ty_agree_test_")
        self.data = cli_util.make_ids_dataset(os.path.join(self.tmp, "data"), docs=40)
        self.gpt2 = os.path.join(CFG.models, "gpt2")
        self.llama = os.path.join(CFG.models, "llama")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def args(self, model=None, data=None, **options):
        """train arguments; options override the defaults (key: option
        without dashes, '_' for '-')."""
        opts = {"out": os.path.join(self.tmp, "out"), "max_steps": "2", "batch_size": "2",
                "backend": dist.BACKEND, "log_every": "100", "dist_timeout": "20",
                "cache_dir": "none"}
        opts.update(options)
        out = ["train", "--model", model or self.gpt2, "--data", data or self.data]
        for k, v in opts.items():
            out += ["--" + k.replace("_", "-"), v]
        return out

    def assert_disagree(self, r, text):
        """Both ranks stop with the same message holding `text`."""
        err = r.stdout + r.stderr
        self.assertEqual(r.returncode, 1, err[-4000:])
        for rank in (0, 1):
            self.assertIn("rank %d: trainyard train: FAILED_PRECONDITION: %s" % (rank, text),
                          err)
        self.assertIn("every rank of one job must be started with the same options", err)
        self.assertNotIn("its error is above", err)
        for crash in ("munmap_chunk", "Segmentation fault", "signal 11", "MPI_ERR",
                      "MPI_ABORT"):
            self.assertNotIn(crash, err)

    def test_ranks_load_different_models(self):
        r = mpmd(self.args(self.gpt2), self.args(self.llama))
        self.assert_disagree(r, "ranks disagree on '--model' (its config.json and its weights' "
                             "names, dtypes and shapes): rank 1 has llama from %s, rank 0 has "
                             "gpt2 from %s" % (self.llama, self.gpt2))

    def test_ranks_differ_in_one_option(self):
        a, b = os.path.join(self.tmp, "a"), os.path.join(self.tmp, "b")
        cases = [("lr", "1e-3", "2e-3", "0.001", "0.002"),
                 ("batch_size", "2", "4", "2", "4"),
                 ("dtype", "f32", "bf16", "f32", "bf16"),
                 ("seed", "1", "2", "1", "2"),
                 ("out", a, b, a, b),
                 ("max_steps", "2", "3", "2", "3"),
                 ("zero", "0", "1", "0", "1")]
        for key, v0, v1, shown0, shown1 in cases:
            with self.subTest(option=key):
                # a fresh run folder for each case
                own = {"out": os.path.join(self.tmp, "out-" + key)}
                r = mpmd(self.args(**dict(own, **{key: v0})), self.args(**dict(own, **{key: v1})))
                option = "--" + key.replace("_", "-")
                self.assert_disagree(r, "ranks disagree on '%s': rank 1 has %s, rank 0 has %s"
                                     % (option, shown1, shown0))
                # nothing was written: the run folder is rank 0's, after the check
                for folder in (own["out"], a, b):
                    self.assertFalse(os.path.exists(os.path.join(folder, "metrics.jsonl")))

    def test_paths_may_differ_when_contents_agree(self):
        # the same model and data under other paths, and per-host caches
        model = os.path.join(self.tmp, "copy", "gpt2")
        shutil.copytree(self.gpt2, model)
        data = os.path.join(self.tmp, "copy", "data")
        shutil.copytree(self.data, data)
        out = os.path.join(self.tmp, "run")
        r = mpmd(self.args(out=out, cache_dir=os.path.join(self.tmp, "c0")),
                 self.args(model, data, out=out, cache_dir=os.path.join(self.tmp, "c1")))
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-4000:])
        self.assertEqual(sorted(dist.losses(out)), [1, 2])

    def test_missing_rank_at_start_up_is_named(self):
        for hung, named_by in ((1, 0), (0, 1)):
            with self.subTest(hung=hung):
                args = self.args(dist_timeout="2")
                r = dist.mpirun(2, args,
                                env={"TRAINYARD_DEBUG_DIST_FAULT": "%d:0:hang" % hung},
                                timeout=120)
                err = r.stdout + r.stderr
                self.assertNotEqual(r.returncode, 0, err[-3000:])
                self.assertIn("rank %d: TRAINYARD_DEBUG_DIST_FAULT: hang at step 0" % hung, err)
                # the missing rank is named with its host (MPI_Get_processor_name)
                self.assertRegex(err, r"rank %d: trainyard train: DEADLINE_EXCEEDED: rank %d on "
                                      r"host \S+ did not reach the rank agreement"
                                 % (named_by, hung))
                self.assertIn("within 2 s (--dist-timeout)", err)


def main():
    global CFG
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--models", required=True, help="tests/fixtures/models")
    parser.add_argument("--mpi-shim", required=True, help="the build's libty_mpi.so")
    parser.add_argument("--commfake-dir", help="unused (the distributed suites' arguments)")
    CFG, rest = parser.parse_known_args()
    dist.CFG = CFG
    cli_util.CFG = CFG
    return dist.run_suites(rest)


if __name__ == "__main__":
    sys.exit(main())
