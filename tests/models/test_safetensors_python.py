#!/usr/bin/env python3
"""Interoperability with the Python `safetensors` package (the reference
implementation), both ways:

  - files and sharded folders written by our writer (through ty_st_tool) load
    in Python with exactly the bytes we wrote, and a single file is byte for
    byte what Python itself writes for the same tensors;
  - files Python writes (random tensors of every dtype) read back through our
    reader (ty_st_tool dump) unchanged.

Needs the `safetensors` and `numpy` packages (scripts/install-deps.sh
installs them). Without them the test is SKIPPED: it says why on stderr and
exits 77, which ctest reports as skipped, never as passed.

    python3 tests/models/test_safetensors_python.py --tool build/tests/ty_st_tool
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import unittest

# 0, 1 or 77 (skipped) for ctest (tests/common/unittest_exit.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import unittest_exit  # noqa: E402

try:
    import numpy as np
    import safetensors
    from safetensors import TensorSpec, deserialize, safe_open, serialize, serialize_file
    from safetensors.numpy import save_file
    IMPORT_ERROR = None
except ImportError as e:  # pragma: no cover - the skip path
    IMPORT_ERROR = e

TOOL = None
SPEC_DTYPE = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64",
              "I32": "int32", "I64": "int64", "U8": "uint8", "BOOL": "bool"}
NUMPY_DTYPE = {"F32": "float32", "F16": "float16", "F64": "float64", "I32": "int32",
               "I64": "int64", "U8": "uint8", "BOOL": "bool"}
SHARD_NAME = re.compile(r"^model-(\d{5})-of-(\d{5})\.safetensors$")


def run_tool(*args):
    proc = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"ty_st_tool {' '.join(map(str, args))} failed "
                             f"({proc.returncode}): {proc.stderr}")
    return json.loads(proc.stdout)


def python_view(data):
    """name -> (dtype, shape, bytes) through the reference's deserializer."""
    return {name: (t["dtype"], list(t["shape"]), bytes(t["data"]))
            for name, t in deserialize(data)}


def described(tensors):
    return {name: (t["dtype"], t["shape"], bytes.fromhex(t["hex"]))
            for name, t in tensors.items()}


def hub_shards(sizes, max_bytes):
    """huggingface_hub's split_torch_state_dict_into_shards, by size only."""
    shards, current, current_size = [], [], 0
    for name, size in sizes:
        if size > max_bytes:
            shards.append([name])
            continue
        if current and current_size + size > max_bytes:
            shards.append(current)
            current, current_size = [], 0
        current.append(name)
        current_size += size
    if current:
        shards.append(current)
    return shards


class OursReadByPython(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.seed = random.getrandbits(48)
        print(f"seed {self.seed}", file=sys.stderr)

    def tearDown(self):
        self.tmp.cleanup()

    def test_single_file(self):
        path = os.path.join(self.tmp.name, "ours.safetensors")
        expected = run_tool("write", path, self.seed)
        with open(path, "rb") as f:
            data = f.read()
        self.assertEqual(python_view(data), described(expected["tensors"]))
        with safe_open(path, framework="numpy") as f:
            self.assertEqual(f.metadata(), {"format": "pt"})
            for name in f.keys():
                dtype, shape, raw = described(expected["tensors"])[name]
                if dtype == "BF16":
                    continue  # numpy has no bfloat16; covered by deserialize above
                array = f.get_tensor(name)
                self.assertEqual(list(array.shape), shape, name)
                self.assertEqual(array.dtype, np.dtype(NUMPY_DTYPE[dtype]), name)
                self.assertEqual(array.tobytes(), raw, name)

    def test_single_file_is_byte_identical_to_python(self):
        path = os.path.join(self.tmp.name, "ours.safetensors")
        expected = run_tool("write", path, self.seed)
        keep = {}
        specs = {}
        for name, (dtype, shape, raw) in described(expected["tensors"]).items():
            keep[name] = np.frombuffer(raw, dtype=np.uint8).copy() if raw else np.zeros(1, np.uint8)
            specs[name] = TensorSpec(dtype=SPEC_DTYPE[dtype], shape=shape,
                                     data_ptr=keep[name].ctypes.data, data_len=len(raw))
        theirs = bytes(serialize(specs, metadata={"format": "pt"}))
        with open(path, "rb") as f:
            ours = f.read()
        self.assertEqual(ours[:8], theirs[:8], "header length")
        self.assertEqual(ours, theirs)

    def test_sharded_folder(self):
        folder = self.tmp.name
        max_bytes = 64
        expected = run_tool("write-dir", folder, self.seed, max_bytes)
        want = described(expected["tensors"])
        plan = hub_shards([(n, len(want[n][2])) for n in expected["order"]], max_bytes)
        if len(plan) == 1:  # everything fits: one model.safetensors, no index
            self.assertEqual(sorted(os.listdir(folder)), ["model.safetensors"])
            with open(os.path.join(folder, "model.safetensors"), "rb") as f:
                self.assertEqual(python_view(f.read()), want)
            return
        with open(os.path.join(folder, "model.safetensors.index.json")) as f:
            text = f.read()
        index = json.loads(text)
        # Exactly as transformers writes the index.
        self.assertEqual(text, json.dumps(index, indent=2, sort_keys=True) + "\n")
        self.assertEqual(set(index), {"metadata", "weight_map"})
        self.assertEqual(index["metadata"], {"total_size": sum(len(r) for _, _, r in want.values())})
        # Cut and numbered as huggingface_hub does it.
        weight_map = index["weight_map"]
        self.assertEqual(weight_map, {t: f"model-{i + 1:05d}-of-{len(plan):05d}.safetensors"
                                      for i, group in enumerate(plan) for t in group})
        shard_files = sorted(set(weight_map.values()))
        self.assertEqual(sorted(os.listdir(folder)),
                         sorted(shard_files + ["model.safetensors.index.json"]))
        seen = {}
        for name in shard_files:
            self.assertRegex(name, SHARD_NAME)
            with open(os.path.join(folder, name), "rb") as f:
                view = python_view(f.read())
            for tensor, value in view.items():
                self.assertNotIn(tensor, seen, "tensor in two shards")
                self.assertEqual(weight_map[tensor], name)
                seen[tensor] = value
        self.assertEqual(seen, want)


class PythonReadByUs(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        seed = random.getrandbits(48)
        print(f"seed {seed}", file=sys.stderr)
        self.rng = np.random.default_rng(seed)

    def tearDown(self):
        self.tmp.cleanup()

    def random_tensors(self):
        """name -> (safetensors dtype, array of the raw values)."""
        out = {}
        for i in range(24):
            dtype = list(SPEC_DTYPE)[i % len(SPEC_DTYPE)]
            shape = tuple(int(d) for d in self.rng.integers(0, 6, size=int(self.rng.integers(0, 4))))
            if dtype == "BOOL":
                arr = self.rng.integers(0, 2, size=shape).astype(np.bool_)
            elif dtype == "BF16":
                arr = self.rng.integers(0, 2**16, size=shape, dtype=np.uint16)
            else:
                arr = self.rng.integers(0, 256, size=(int(np.prod(shape)) *
                                                      np.dtype(NUMPY_DTYPE[dtype]).itemsize,),
                                        dtype=np.uint8).view(NUMPY_DTYPE[dtype]).reshape(shape)
            out[f"model.layers.{i}.{dtype.lower()}"] = (dtype, np.ascontiguousarray(arr))
        return out

    def test_serialize_file(self):
        tensors = self.random_tensors()
        path = os.path.join(self.tmp.name, "theirs.safetensors")
        specs = {n: TensorSpec(dtype=SPEC_DTYPE[d], shape=list(a.shape), data_ptr=a.ctypes.data,
                               data_len=a.nbytes) for n, (d, a) in tensors.items()}
        serialize_file(specs, path, metadata={"format": "pt", "note": "written by python"})
        got = run_tool("dump", path)
        self.assertEqual(got["metadata"], {"format": "pt", "note": "written by python"})
        self.assertEqual(described(got["tensors"]),
                         {n: (d, list(a.shape), a.tobytes()) for n, (d, a) in tensors.items()})

    def test_numpy_save_file(self):
        tensors = {n: a for n, (d, a) in self.random_tensors().items() if d != "BF16"}
        path = os.path.join(self.tmp.name, "numpy.safetensors")
        save_file(tensors, path)
        got = run_tool("dump", path)
        self.assertEqual(got["metadata"], {})
        self.assertEqual({n: (list(s), bytes(r)) for n, (_, s, r) in described(got["tensors"]).items()},
                         {n: (list(a.shape), a.tobytes()) for n, a in tensors.items()})


def main():
    global TOOL
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True)
    args, rest = parser.parse_known_args()
    if IMPORT_ERROR is not None:
        print(f"SKIPPED: the Python safetensors/numpy packages are not importable "
              f"({IMPORT_ERROR}); install them with: python3 -m pip install safetensors numpy "
              f"(scripts/install-deps.sh does)", file=sys.stderr)
        return 77
    TOOL = args.tool
    print(f"safetensors {safetensors.__version__}, numpy {np.__version__}", file=sys.stderr)
    result = unittest.main(argv=[sys.argv[0], *rest], exit=False, verbosity=2).result
    return unittest_exit.exit_code(result)


if __name__ == "__main__":
    sys.exit(main())
