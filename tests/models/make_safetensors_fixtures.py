#!/usr/bin/env python3
"""Writes the committed safetensors fixtures with the Python `safetensors`
package (the reference implementation), so that CI can check our reader
against its files without any Python package installed.

    python3 -m pip install safetensors numpy
    python3 tests/models/make_safetensors_fixtures.py

Outputs (deterministic: fixed seed; rerun after changing this script):
  tests/fixtures/safetensors/python_all_dtypes.safetensors   every dtype we read
  tests/fixtures/safetensors/python_all_dtypes.json          what it holds
  tests/fixtures/safetensors/python_sharded/                  2 shards + index,
      named and laid out as transformers' save_pretrained does
  tests/fixtures/safetensors/python_sharded.json              what they hold
  tests/fuzz/corpus/safetensors/*                             fuzzing seeds

The .json files list, per tensor, the safetensors dtype, the shape, the raw
little-endian bytes in hex and, for floating dtypes, the values as numbers
(bf16 and f16 widened to f32 by numpy), plus the file's __metadata__.
"""
import json
import os
import struct
import sys

import numpy as np
from safetensors import TensorSpec, serialize, serialize_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "safetensors")
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus", "safetensors")

# numpy has no bfloat16: bf16 tensors are uint16 bit patterns, written with
# dtype "bfloat16" through TensorSpec.
SPEC_DTYPE = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64",
              "I32": "int32", "I64": "int64", "U8": "uint8", "BOOL": "bool"}


def bf16_bits(values):
    """float32 -> bf16 bits, round to nearest even (finite inputs)."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return bits.astype(np.uint16)


def make_tensors(rng, suffix=""):
    """name -> (safetensors dtype, numpy array holding the raw bytes)."""
    def normal(shape):
        return rng.standard_normal(shape).astype(np.float32)
    return {
        "wte.weight" + suffix: ("F32", normal((3, 4))),
        "h.0.attn.c_attn.bias" + suffix: ("F16", normal((5,)).astype(np.float16)),
        "h.0.mlp.c_fc.weight" + suffix: ("BF16", bf16_bits(normal((2, 3)))),
        "ln_f.eps" + suffix: ("F64", rng.standard_normal((2,))),
        "position_ids" + suffix: ("I32", np.arange(7, dtype=np.int32) - 3),
        "token_ids" + suffix: ("I64", np.array([-(2**40), 0, 2**62], dtype=np.int64)),
        "bytes" + suffix: ("U8", rng.integers(0, 256, size=(6,), dtype=np.uint8)),
        "mask" + suffix: ("BOOL", np.array([True, False, False, True])),
        "scalar" + suffix: ("F32", np.array(2.5, dtype=np.float32)),
        "empty" + suffix: ("F32", np.zeros((0, 3), dtype=np.float32)),
        "ünïcode.wéight" + suffix: ("F32", normal((2,))),
    }


def specs(tensors):
    return {name: TensorSpec(dtype=SPEC_DTYPE[dt], shape=list(arr.shape),
                             data_ptr=arr.ctypes.data, data_len=arr.nbytes)
            for name, (dt, arr) in tensors.items()}


def describe(tensors):
    out = {}
    for name, (dt, arr) in tensors.items():
        entry = {"dtype": dt, "shape": list(arr.shape), "hex": arr.tobytes().hex()}
        if dt == "BF16":
            entry["values"] = [float(v) for v in
                               (arr.astype(np.uint32) << 16).view(np.float32).ravel()]
        elif dt in ("F32", "F16", "F64"):
            entry["values"] = [float(v) for v in arr.astype(np.float64).ravel()]
        out[name] = entry
    return out


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")


def raw_file(header, data=b"", length=None):
    text = header.encode("utf-8")
    return struct.pack("<Q", len(text) if length is None else length) + text + data


def main():
    os.makedirs(FIXTURES, exist_ok=True)
    os.makedirs(CORPUS, exist_ok=True)
    rng = np.random.default_rng(20240611)

    meta = {"format": "pt"}
    single = make_tensors(rng)
    path = os.path.join(FIXTURES, "python_all_dtypes.safetensors")
    serialize_file(specs(single), path, metadata=meta)
    write_json(os.path.join(FIXTURES, "python_all_dtypes.json"),
               {"metadata": meta, "tensors": describe(single)})

    # Two shards and an index, as transformers' save_pretrained writes them.
    shard_dir = os.path.join(FIXTURES, "python_sharded")
    os.makedirs(shard_dir, exist_ok=True)
    tensors = make_tensors(rng, suffix=".s")
    names = list(tensors)
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map, total = {}, 0
    for i, part in enumerate(halves):
        shard = f"model-{i + 1:05d}-of-{len(halves):05d}.safetensors"
        serialize_file(specs({n: tensors[n] for n in part}), os.path.join(shard_dir, shard),
                       metadata=meta)
        for n in part:
            weight_map[n] = shard
            total += tensors[n][1].nbytes
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(shard_dir, "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    write_json(os.path.join(FIXTURES, "python_sharded.json"),
               {"metadata": meta, "total_size": total, "tensors": describe(tensors)})

    # Fuzzing seeds: the reference's files plus small hand-made edge cases.
    with open(path, "rb") as f:
        seeds = {"python_all_dtypes.safetensors": f.read()}
    small = {"a": ("F32", np.array([1.0, -2.0], dtype=np.float32)),
             "b": ("BF16", bf16_bits([3.0])), "c": ("BOOL", np.array([True]))}
    seeds["python_small.safetensors"] = bytes(serialize(specs(small), metadata=meta))
    seeds["empty_header.safetensors"] = raw_file("{}      ")
    seeds["metadata_only.safetensors"] = raw_file('{"__metadata__":{"format":"pt"}}')
    seeds["unaligned.safetensors"] = raw_file(
        '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}}   ',
        b"\x07" + struct.pack("<2f", 1.5, -2.25))
    seeds["overlap.safetensors"] = raw_file(
        '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
        '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', bytes(12))
    seeds["truncated.safetensors"] = seeds["python_small.safetensors"][:-3]
    seeds["pickle.bin"] = bytes.fromhex("80028a0a6cfc9c46f9206aa85019")
    for name, data in seeds.items():
        with open(os.path.join(CORPUS, name), "wb") as f:
            f.write(data)
    print(f"wrote fixtures under {FIXTURES} and {len(seeds)} seeds under {CORPUS}")


if __name__ == "__main__":
    sys.exit(main())
