#!/usr/bin/env python3
"""End-to-end tests of `trainyard ckpt diff` (issue 34) on checkpoints of the
tiny GPT-2 fixture (Python standard library only).

- DiffTest: a checkpoint against its copy agrees (exit 0, "0 differing");
  a copy with one tensor moved by one ULP and one by a large amount differs
  (exit 1), both named, the large one first, and the one-ULP one passes
  --rtol 1e-6 and --tol; --top; --json holds the figures (errors, ULP,
  counts, the SHA-256 of each side's bytes, the files); NaN at the same
  place agrees, a NaN on one side is counted; a tensor on one side only, of
  another shape or dtype; --weights-only; a single file and a sharded
  Hugging Face folder against a folder; bad inputs (missing path, empty
  folder, truncated file, unknown option, bad values) exit 2 with the
  message; the pages of compared tensors are handed back (peak memory).
- ZeroDiffTest: a ZeRO-1 checkpoint of `mpirun -np 2 ... --zero 1` (optimizer
  shards and index) against the whole checkpoint that `ckpt merge` makes of
  a copy agrees; a perturbed optimizer state is named. Exit 77 (skipped,
  saying why) without mpirun or the MPI shim, as its neighbours do.
"""
import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import cli_util
from test_distributed_cli import MPIRUN, mpi_missing, rank_env  # noqa: E402 (beside this file)

CFG = None
BACKEND = "cpu?threads=1"
SIZES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}


def run(args, timeout=300):
    return cli_util.run(args, timeout=timeout)


def read_st(path):
    """(metadata, {name: [dtype, shape, bytes]} in file order) of a
    safetensors file: 8-byte little-endian header length, JSON, data."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    tensors = {}
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        lo, hi = e["data_offsets"]
        tensors[name] = [e["dtype"], e["shape"], bytearray(data[lo:hi])]
    return meta, tensors


def write_st(path, meta, tensors):
    """Writes {name: [dtype, shape, bytes]} (larger dtypes first, so every
    tensor is aligned) with `meta` as __metadata__."""
    header, blobs, offset = {"__metadata__": meta}, [], 0
    for name, (dtype, shape, data) in sorted(tensors.items(), key=lambda kv: -SIZES[kv[1][0]]):
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(bytes(data))
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def f32_at(data, i):
    return struct.unpack_from("<f", data, 4 * i)[0]


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="ty_ckpt_diff_")
        cls.data = cli_util.make_ids_dataset(os.path.join(cls.root, "data"), docs=40)
        cls.common = ["--model", os.path.join(CFG.models, "gpt2"), "--data", cls.data,
                      "--backend", BACKEND, "--cache-dir", "none", "--log-every", "100",
                      "--batch-size", "2", "--max-steps", "2"]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="t_", dir=self.root)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def diff(self, *args, rc):
        r = run(["ckpt", "diff"] + [str(a) for a in args])
        self.assertEqual(r.returncode, rc, "ckpt diff %s:\n%s%s" % (args, r.stdout[-3000:],
                                                                    r.stderr[-3000:]))
        return r

    def copy(self, src, name):
        dst = self.path(name)
        shutil.copytree(src, dst)
        return dst


class DiffTest(Base):
    # names of the fixture's tensors used below
    ULP = "transformer.h.0.mlp.c_fc.weight"
    BIG = "transformer.h.0.attn.c_proj.weight"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        out = os.path.join(cls.root, "run")
        r = run(["train"] + cls.common + ["--out", out])
        assert r.returncode == 0, r.stderr
        cls.ckpt = os.path.join(out, "checkpoint-2")

    def perturbed(self, name, ulp=True, big=True):
        """A copy of the checkpoint with ULP's first element of magnitude
        > 1e-3 one ULP up, and BIG's element 3 plus 1000, rewritten in
        place in model.safetensors. Returns (folder, index in ULP)."""
        dst = self.copy(self.ckpt, name)
        path = os.path.join(dst, "model.safetensors")
        meta, tensors = read_st(path)
        data = tensors[self.ULP][2]
        k = next(i for i in range(len(data) // 4) if abs(f32_at(data, i)) > 1e-3)
        if ulp:
            struct.pack_into("<I", data, 4 * k, struct.unpack_from("<I", data, 4 * k)[0] + 1)
        if big:
            d = tensors[self.BIG][2]
            struct.pack_into("<f", d, 12, f32_at(d, 3) + 1000.0)
        write_st(path, meta, tensors)
        return dst, k

    def test_copy_agrees(self):
        copy = self.copy(self.ckpt, "copy")
        r = self.diff(self.ckpt, copy, rc=0)
        self.assertIn("84 tensors compared: 84 identical, 0 within tolerance, 0 differing; "
                      "0 only in A, 0 only in B", r.stdout)
        # which files each side's tensors came from, and the rule
        self.assertIn("A: %s: model.safetensors (28 tensors), optimizer.safetensors "
                      "(56 tensors)" % self.ckpt, r.stdout)
        self.assertIn("NaN equals NaN at the same place", r.stdout)

    def test_perturbed_tensors_are_named_worst_first(self):
        b, _ = self.perturbed("p")
        r = self.diff(self.ckpt, b, rc=1)
        self.assertIn("84 tensors compared: 82 identical, 0 within tolerance, 2 differing", r.stdout)
        self.assertIn(self.ULP, r.stdout)
        self.assertIn(self.BIG, r.stdout)
        self.assertLess(r.stdout.index("1. " + self.BIG), r.stdout.index("2. " + self.ULP))
        self.assertIn("max ULP 1 ", r.stdout)
        # the one-ULP change agrees within a relative tolerance of 1e-6
        r = self.diff(self.ckpt, b, "--rtol", "1e-6", rc=1)
        self.assertIn("82 identical, 1 within tolerance, 1 differing", r.stdout)
        listed = r.stdout[r.stdout.index("differing tensors, worst first"):]
        self.assertIn(self.BIG, listed)
        self.assertNotIn(self.ULP, listed)

    def test_tolerances(self):
        b, _ = self.perturbed("ulp", big=False)
        self.diff(self.ckpt, b, rc=1)                       # bitwise by default
        r = self.diff(self.ckpt, b, "--rtol", "1e-6", rc=0)
        self.assertIn("83 identical, 1 within tolerance, 0 differing", r.stdout)
        self.assertIn("|a-b| <= 0 + 1e-06*|b|", r.stdout)
        self.diff(self.ckpt, b, "--rtol", "1e-9", rc=1)     # one ULP is ~1e-7 relative
        self.diff(self.ckpt, b, "--tol", "1e-3", rc=0)
        self.diff(self.ckpt, b, "--tol", "1e-12", rc=1)
        c, _ = self.perturbed("big", ulp=False)
        self.diff(self.ckpt, c, "--tol", "999", rc=1)       # 1000 off
        self.diff(self.ckpt, c, "--tol", "1001", rc=0)

    def test_top(self):
        b, _ = self.perturbed("p")
        r = self.diff(self.ckpt, b, "--top", "1", rc=1)
        self.assertIn("1. " + self.BIG, r.stdout)
        self.assertNotIn(self.ULP, r.stdout)
        self.assertIn("... and 1 more (--top N lists more)", r.stdout)
        r = self.diff(self.ckpt, b, "--top", "0", rc=1)
        self.assertNotIn(self.BIG, r.stdout)
        self.assertIn("... and 2 more", r.stdout)

    def test_json(self):
        b, k = self.perturbed("p")
        r = self.diff(self.ckpt, b, "--json", rc=1)
        report = json.loads(r.stdout)
        self.assertEqual(report["summary"], {"compared": 84, "identical": 82,
                                             "within_tolerance": 0, "differing": 2,
                                             "only_in_a": 0, "only_in_b": 0})
        self.assertFalse(report["agree"])
        self.assertEqual([f["part"] for f in report["a"]["files"]], ["model", "optimizer"])
        tensors = {t["name"]: t for t in report["tensors"]}
        self.assertEqual(len(tensors), 84)
        self.assertEqual([t["name"] for t in report["tensors"][:2]], [self.BIG, self.ULP])
        _, mine = read_st(os.path.join(self.ckpt, "model.safetensors"))
        _, theirs = read_st(os.path.join(b, "model.safetensors"))
        big, ulp = tensors[self.BIG], tensors[self.ULP]
        self.assertEqual(big["status"], "differing")
        want = abs(f32_at(theirs[self.BIG][2], 3) - f32_at(mine[self.BIG][2], 3))
        self.assertAlmostEqual(big["max_abs_error"], want, places=3)
        self.assertEqual(big["differing_elements"], 1)
        self.assertEqual(big["outside_tolerance"], 1)
        self.assertEqual(ulp["max_ulp"], 1)
        x, y = f32_at(mine[self.ULP][2], k), f32_at(theirs[self.ULP][2], k)
        self.assertEqual(ulp["max_abs_error"], abs(x - y))
        self.assertEqual(ulp["max_rel_error"], abs(x - y) / max(abs(x), abs(y)))
        for side, tensors_of in (("a", mine), ("b", theirs)):
            self.assertEqual(ulp[side]["sha256"],
                             hashlib.sha256(tensors_of[self.ULP][2]).hexdigest()[:16])
            self.assertEqual(ulp[side]["dtype"], "F32")
            self.assertEqual(ulp[side]["shape"], tensors_of[self.ULP][1])
            self.assertEqual(ulp[side]["nan"], 0)
            self.assertTrue(ulp[side]["file"].endswith("/model.safetensors"))
        self.assertNotEqual(ulp["a"]["sha256"], ulp["b"]["sha256"])
        same = tensors["transformer.wte.weight"]
        self.assertEqual(same["status"], "identical")
        self.assertEqual(same["a"]["sha256"], same["b"]["sha256"])
        self.assertEqual(same["max_ulp"], 0)
        state = tensors["transformer.wte.weight.exp_avg"]
        self.assertTrue(state["a"]["file"].endswith("/optimizer.safetensors"))
        # agreeing: "agree" true, exit 0
        report = json.loads(self.diff(self.ckpt, self.ckpt, "--json", rc=0).stdout)
        self.assertTrue(report["agree"])

    def test_nan_rules(self):
        def with_nan(name, nan_at, nan):
            dst = self.copy(self.ckpt, name)
            path = os.path.join(dst, "model.safetensors")
            meta, tensors = read_st(path)
            for i in nan_at:
                struct.pack_into("<I", tensors[self.ULP][2], 4 * i, nan + i)
            write_st(path, meta, tensors)
            return dst
        a = with_nan("na", [0, 5], 0x7fc00000)
        b = with_nan("nb", [0, 5], 0xffc00007)  # other sign and payloads
        c = with_nan("nc", [0], 0x7fc00000)
        r = self.diff(a, b, rc=0)  # NaN payloads differ; the places match
        self.assertIn("83 identical, 1 within tolerance", r.stdout)
        r = self.diff(a, c, "--json", "--tol", "1e9", rc=1)
        t = {t["name"]: t for t in json.loads(r.stdout)["tensors"]}[self.ULP]
        self.assertEqual((t["a"]["nan"], t["b"]["nan"]), (2, 1))
        self.assertEqual((t["max_abs_error"], t["max_rel_error"], t["max_ulp"]),
                         ("inf", "inf", "inf"))

    def test_only_on_one_side_and_mismatches(self):
        b = self.copy(self.ckpt, "b")
        path = os.path.join(b, "model.safetensors")
        meta, tensors = read_st(path)
        del tensors[self.ULP]
        tensors["extra.weight"] = ["F32", [2], bytearray(8)]
        d = tensors[self.BIG]
        tensors[self.BIG] = ["BF16", d[1], bytearray(b"".join(d[2][i + 2:i + 4]
                                                              for i in range(0, len(d[2]), 4)))]
        ln = "transformer.ln_f.weight"
        tensors[ln][1] = [2, tensors[ln][1][0] // 2]
        write_st(path, meta, tensors)
        r = self.diff(self.ckpt, b, rc=1)
        self.assertIn("83 tensors compared: 81 identical, 0 within tolerance, 2 differing; "
                      "1 only in A, 1 only in B", r.stdout)
        self.assertIn("only in A:\n  %s (F32 [32,128], model.safetensors)" % self.ULP, r.stdout)
        self.assertIn("only in B:\n  extra.weight (F32 [2], model.safetensors)", r.stdout)
        self.assertIn("%s: A is F32 [32,32] (model.safetensors), B is BF16 [32,32]" % self.BIG,
                      r.stdout)
        self.assertIn("%s: A is F32 [32] (model.safetensors), B is F32 [2,16]" % ln, r.stdout)
        report = json.loads(self.diff(self.ckpt, b, "--json", rc=1).stdout)
        by = {t["name"]: t for t in report["tensors"]}
        self.assertEqual(by[self.ULP]["status"], "only_in_a")
        self.assertNotIn("b", by[self.ULP])
        self.assertEqual(by["extra.weight"]["status"], "only_in_b")
        self.assertEqual(by[self.BIG]["mismatch"], "dtype")
        self.assertEqual(by[ln]["mismatch"], "shape")

    def test_weights_only(self):
        b = self.copy(self.ckpt, "b")
        os.remove(os.path.join(b, "optimizer.safetensors"))
        r = self.diff(self.ckpt, b, "--top", "100", rc=1)
        self.assertIn("56 only in A", r.stdout)
        self.assertIn("transformer.wte.weight.exp_avg", r.stdout)
        r = self.diff(self.ckpt, b, "--weights-only", rc=0)
        self.assertIn("28 tensors compared: 28 identical", r.stdout)
        self.assertNotIn("optimizer", r.stdout)
        # a damaged optimizer state is not read with --weights-only
        with open(os.path.join(b, "optimizer.safetensors"), "wb") as f:
            f.write(b"broken")
        self.diff(self.ckpt, b, "--weights-only", rc=0)
        self.diff(self.ckpt, b, rc=2)

    def test_file_and_sharded_model_folder(self):
        model = os.path.join(self.ckpt, "model.safetensors")
        r = self.diff(model, self.ckpt, "--weights-only", rc=0)
        self.assertIn("A: %s: one file (28 tensors)" % model, r.stdout)
        # a Hugging Face folder of two shards and an index
        hf = self.path("hf")
        os.mkdir(hf)
        meta, tensors = read_st(model)
        names = list(tensors)
        weight_map = {}
        for k, part in enumerate((names[:10], names[10:])):
            shard = "model-%05d-of-00002.safetensors" % (k + 1)
            write_st(os.path.join(hf, shard), meta, {n: tensors[n] for n in part})
            weight_map.update({n: shard for n in part})
        with open(os.path.join(hf, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
        r = self.diff(hf, model, rc=0)
        self.assertIn("model.safetensors.index.json: 2 shards (28 tensors)", r.stdout)
        report = json.loads(self.diff(hf, model, "--json", rc=0).stdout)
        files = {os.path.basename(t["a"]["file"]) for t in report["tensors"]}
        self.assertEqual(files, {"model-00001-of-00002.safetensors",
                                 "model-00002-of-00002.safetensors"})

    def test_bad_inputs(self):
        empty = self.path("empty")
        os.mkdir(empty)
        truncated = self.path("t.safetensors")
        with open(os.path.join(self.ckpt, "model.safetensors"), "rb") as f:
            blob = f.read()
        with open(truncated, "wb") as f:
            f.write(blob[:len(blob) // 2])
        broken_ckpt = self.copy(self.ckpt, "broken")
        with open(os.path.join(broken_ckpt, "model.safetensors"), "r+b") as f:
            f.truncate(len(blob) - 4)
        missing = self.path("nowhere")
        for args, text in (
                ([self.ckpt, missing], "B: %s does not exist" % missing),
                ([missing, self.ckpt], "A: %s does not exist" % missing),
                ([self.ckpt, empty], "B: %s holds no tensors" % empty),
                ([truncated, self.ckpt], "A: %s" % truncated),
                ([truncated, self.ckpt], "the file is truncated"),
                ([self.ckpt, broken_ckpt], "model.safetensors"),
                ([self.ckpt, self.ckpt, "--bogus"], "unknown option '--bogus'"),
                ([self.ckpt], "give two checkpoints"),
                ([self.ckpt, self.ckpt, self.ckpt], "give two checkpoints"),
                ([self.ckpt, self.ckpt, "--tol", "-1"], "--tol must be a finite number >= 0"),
                ([self.ckpt, self.ckpt, "--rtol", "nan"], "--rtol must be a finite number"),
                ([self.ckpt, self.ckpt, "--top", "x"], "--top must be a number >= 0"),
                ([self.ckpt, self.ckpt, "--tol"], "--tol needs a value"),
                ([self.ckpt, self.ckpt, "--tol", ""], "--tol is empty")):
            with self.subTest(args=args):
                r = self.diff(*args, rc=2)
                self.assertIn(text, r.stderr)
                self.assertIn("trainyard ckpt diff: ", r.stderr)
        r = run(["ckpt", "diff", "--help"])
        self.assertEqual(r.returncode, 0)
        self.assertIn("Exit status: 0 every tensor agrees", r.stdout)

    def test_unreadable_sides(self):
        """The other refusals of a side, each with its message (exit 2)."""
        model = os.path.join(self.ckpt, "model.safetensors")
        no_tensors = self.path("none.safetensors")
        write_st(no_tensors, {}, {})
        only_state = self.path("only_state")
        os.mkdir(only_state)
        shutil.copy(os.path.join(self.ckpt, "optimizer.safetensors"), only_state)
        both = self.copy(self.ckpt, "both")
        meta, tensors = read_st(os.path.join(both, "optimizer.safetensors"))
        tensors["transformer.wte.weight"] = tensors["transformer.wte.weight.exp_avg"]
        write_st(os.path.join(both, "optimizer.safetensors"), meta, tensors)
        mixed = self.copy(self.ckpt, "mixed")
        path = os.path.join(mixed, "optimizer.safetensors")
        meta, tensors = read_st(path)
        run_id = meta["trainyard_run_id"]
        meta["trainyard_run_id"] = "0" * 32
        write_st(path, meta, tensors)
        for args, text in (
                ([model, model + "/x"], "B: cannot read %s/x" % model),
                (["/dev/null", model], "A: /dev/null is neither a folder nor a file"),
                ([no_tensors, model], "A: %s holds no tensors" % no_tensors),
                ([only_state, self.ckpt, "--weights-only"],
                 "A: %s holds no tensors: no model.safetensors (or model.safetensors.index.json)"
                 " (--weights-only leaves out the optimizer state)" % only_state),
                ([self.ckpt, both], "B: tensor 'transformer.wte.weight' is both in "
                 "%s/model.safetensors and in %s/optimizer.safetensors" % (both, both)),
                ([mixed, self.ckpt], "A: %s/optimizer.safetensors is from run %s at step 2, "
                 "but %s/trainer_state.json is from run %s at step 2"
                 % (mixed, "0" * 32, mixed, run_id))):
            with self.subTest(args=args):
                r = self.diff(*args, rc=2)
                self.assertIn(text, r.stderr)
        # a folder of optimizer state alone is compared (its identity: its file's)
        r = self.diff(only_state, self.ckpt, rc=1)
        self.assertIn("56 tensors compared: 56 identical", r.stdout)
        self.assertIn("28 only in B", r.stdout)
        self.diff(mixed, self.ckpt, "--weights-only", rc=0)  # the state is not read

    def test_pages_are_handed_back(self):
        """Two files of 8 x 8 MiB tensors: the diff's peak resident memory
        over a small-file baseline stays well below one whole file, so it
        does not hold both checkpoints (or one) while comparing."""
        big = {"t%d" % i: ["F32", [2 << 20], bytearray(os.urandom(8 << 20))]
               for i in range(8)}
        a, b = self.path("a.safetensors"), self.path("b.safetensors")
        write_st(a, {}, big)
        write_st(b, {}, big)
        small = os.path.join(self.ckpt, "model.safetensors")

        def peak_kib(x, y):
            code = ("import resource, subprocess, sys; "
                    "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
                    "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
            out = subprocess.run([sys.executable, "-c", code, CFG.trainyard, "ckpt", "diff", x, y],
                                 capture_output=True, text=True, check=True).stdout.split()
            self.assertEqual(out[0], "0")
            return int(out[1])
        base, peak = peak_kib(small, small), peak_kib(a, b)
        # about two tensors (16 MiB) at a time; one whole file is 64 MiB,
        # both (what a diff without handing pages back holds) 128 MiB
        self.assertLess(peak - base, 40 << 10, (base, peak))


class ZeroDiffTest(Base):
    def test_zero_shards_against_merged_copy(self):
        missing = mpi_missing(CFG)
        if missing:
            self.skipTest(missing)
        out = self.path("zero")
        r = subprocess.run(MPIRUN + ["-np", "2", CFG.trainyard, "train"] + self.common
                           + ["--out", out, "--zero", "1"], capture_output=True, text=True,
                           env=rank_env(), timeout=300)
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-4000:])
        sharded = os.path.join(out, "checkpoint-2")
        self.assertTrue(os.path.exists(os.path.join(sharded, "optimizer.safetensors.index.json")))
        whole = self.copy(sharded, "whole")
        r = run(["ckpt", "merge", whole])
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.diff(sharded, whole, rc=0)
        self.assertIn("84 tensors compared: 84 identical", r.stdout)
        self.assertIn("A: %s: model.safetensors (28 tensors), optimizer.safetensors.index.json: "
                      "2 shards (56 tensors)" % sharded, r.stdout)
        self.assertIn("B: %s: model.safetensors (28 tensors), optimizer.safetensors "
                      "(56 tensors)" % whole, r.stdout)
        # a state changed in the whole file is found in the shards' tensor
        path = os.path.join(whole, "optimizer.safetensors")
        meta, tensors = read_st(path)
        name = "transformer.h.1.mlp.c_proj.weight.exp_avg_sq"
        struct.pack_into("<f", tensors[name][2], 0, 7.0)
        write_st(path, meta, tensors)
        r = self.diff(sharded, whole, "--json", rc=1)
        report = json.loads(r.stdout)
        self.assertEqual(report["summary"]["differing"], 1)
        top = report["tensors"][0]
        self.assertEqual(top["name"], name)
        self.assertRegex(top["a"]["file"], r"/optimizer-0000[12]-of-00002\.safetensors$")
        self.assertTrue(top["b"]["file"].endswith("/optimizer.safetensors"))


def main():
    global CFG
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--models", required=True, help="tests/fixtures/models")
    parser.add_argument("--mpi-shim", required=True, help="the build's libty_mpi.so")
    CFG, rest = parser.parse_known_args()
    cli_util.CFG = CFG
    cache = tempfile.mkdtemp(prefix="ty_test_xdg_")
    os.environ["XDG_CACHE_HOME"] = cache
    try:
        result = unittest.main(argv=[sys.argv[0], "-v"] + rest, exit=False).result
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return cli_util.exit_code(result)


if __name__ == "__main__":
    sys.exit(main())
