#!/usr/bin/env python3
"""The cuda backend end to end, through the `trainyard` command (Python
standard library only). The checks every device backend passes live in
backend_cli.py (conform, forward against transformers, greedy generation
against cpu, 20 training steps and `compare` against cpu on the GPT-2 and
Llama fixtures, bf16-mixed); this file adds the cuda-specific ones:

- DevicesTest (runs everywhere, with or without a GPU): with a driver and a
  GPU, cuda:N is listed with its name, CUDA version, compute capability and
  memory; without one (CI), the plugin still loads and is listed as
  rejected with the reason ("no CUDA driver (libcuda.so.1: ...)") while the
  other backends work; a driver path that does not exist says so.
- ResumeTest: 40 steps straight equal 20 steps + --resume + 20 steps on
  cuda:0 bit for bit (metrics and final weights), with dropout; in f32 and
  in bf16-mixed (whose bf16 weight copies the resumed run makes afresh).

- TensorCoreTest: a Llama of 64-wide heads (written here: the fixtures'
  heads are 8) trains 3 bf16-mixed steps as on cpu through the tensor-core
  attention kernels (on the emulator, their launches are checked).

CI runs the suites but DevicesTest and FaultTest on the CPU emulator of
the driver (tests/cuda/emu, ctest cuda_emu_cli_*); on a GPU they run as
cuda_cli_*.
- FaultTest: an illegal address inside a kernel, an impossible launch, a
  device-side trap, a (simulated) lost device, out-of-memory at compile and
  at run (memory_limit), and a fatbin without the card's architecture: each
  is a clear error naming the device and the cause, nothing hangs, the
  process exits non-zero, and the last checkpoint stays loadable. The
  faults launch test-only kernels the plugin does not embed (--fatbin-test
  names their folder); without it the hook says where to find them.

Every suite but DevicesTest exits 77 (skipped, with the reason) when no
CUDA device is usable, which is the case in CI.
"""
import glob
import json
import os
import shutil
import sys
import tempfile
import unittest

from backend_cli import (CFG, ATTENTION_MERGE_OPS, COLLECTIVE_OPS, VOCAB_PARALLEL_OPS, ConformTest, ForwardTest, GenerateTest,  # noqa: F401
                         MixedPrecisionTest,
                         TrainTest, devices_json, make_id_dataset, parse_common, read_safetensors,
                         run, skip_unless_usable)

# 0, 1 or 77 (skipped) for ctest (tests/common/unittest_exit.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import unittest_exit  # noqa: E402

FATBIN_SM80 = None  # a folder with elementwise.fatbin built for sm_80 only
FATBIN_TEST = None  # the folder of the test-only fatbins (kernels/test.cu), not embedded
CUDA_STUB = None    # the toolkit's stub libcuda.so (every symbol, no driver)


def cuda_usable():
    return "cuda" in [b["name"] for b in devices_json()["backends"]]


# cuda runs every op of the op set, the memory levers' ops and issue 29's
# serving ops included, but the collective ops (which it refuses by name
# until it runs them on its NCCL communicator), the vocabulary-parallel ones
# and attention_merge (context parallel runs on the host backends for now).
CFG.refused_ops = COLLECTIVE_OPS | VOCAB_PARALLEL_OPS | ATTENTION_MERGE_OPS


class DevicesTest(unittest.TestCase):
    def test_listed_or_rejected_with_reason(self):
        data = devices_json()
        self.assertIn("cpu", [b["name"] for b in data["backends"]])
        backends = [b for b in data["backends"] if b["name"] == "cuda"]
        if backends:
            devices = backends[0]["devices"]
            self.assertGreaterEqual(len(devices), 1)
            for i, d in enumerate(devices):
                self.assertEqual(d["uri"], "cuda:%d" % i)
                self.assertTrue(d["name"].startswith("NVIDIA"), d["name"])
                self.assertTrue(d["api_version"].startswith("CUDA "), d["api_version"])
                self.assertIn("compute capability", d["api_version"])
                self.assertGreater(d["memory_bytes"], 1 << 30)
            print("cuda devices: %s" % ", ".join("%s %s (%s)" % (d["uri"], d["name"],
                                                             d["api_version"])
                                                 for d in devices), file=sys.stderr)
        else:
            rejected = [r for r in data["rejected"] if r["name"] == "cuda"]
            self.assertEqual(len(rejected), 1, data["rejected"])
            self.assertEqual(rejected[0]["kind"], "unavailable")
            self.assertRegex(rejected[0]["reason"], r"no CUDA (driver|device)")
            print("cuda plugin loaded; rejected as unavailable: %s" % rejected[0]["reason"],
                  file=sys.stderr)
        r = run(["devices"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("cuda", r.stdout)

    def test_every_driver_entry_resolves(self):
        """The toolkit's stub libcuda.so exports every driver entry point but
        refuses cuInit: loading it proves the plugin finds each symbol it
        needs by the name cuda.h declares (on machines without a GPU too)."""
        if not CUDA_STUB or not os.path.exists(CUDA_STUB):
            self.skipTest("no stub libcuda.so in the CUDA toolkit")
        data = devices_json({"TRAINYARD_CUDA_DRIVER": CUDA_STUB})
        rejected = [r for r in data["rejected"] if r["name"] == "cuda"]
        self.assertEqual(len(rejected), 1, data["rejected"])
        self.assertIn("failed to initialize (cuInit: CUDA_ERROR_STUB_LIBRARY",
                      rejected[0]["reason"])

    def test_missing_driver_named(self):
        env = {"TRAINYARD_CUDA_DRIVER": "/nonexistent/libcuda.so.1"}
        data = devices_json(env)
        self.assertNotIn("cuda", [b["name"] for b in data["backends"]])
        self.assertIn("cpu", [b["name"] for b in data["backends"]])
        rejected = [r for r in data["rejected"] if r["name"] == "cuda"]
        self.assertEqual(len(rejected), 1, data["rejected"])
        self.assertIn("no CUDA driver (/nonexistent/libcuda.so.1", rejected[0]["reason"])
        with tempfile.TemporaryDirectory() as tmp:
            tokens = os.path.join(tmp, "tokens.json")
            with open(tokens, "w") as f:
                f.write("[[1, 2, 3]]")
            r = run(["forward", "--model", os.path.join(CFG.models, "gpt2"), "--tokens", tokens,
                     "--out", os.path.join(tmp, "out.safetensors"), "--backend", "cuda:0"],
                    env=env)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("UNAVAILABLE", r.stderr)
        self.assertIn("no CUDA driver", r.stderr)


class ResumeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ty_cuda_resume_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def train(self, data, out, steps, extra=()):
        r = run(["train", "--model", os.path.join(CFG.models, "gpt2"), "--data", data, "--out",
                 out, "--max-steps", str(steps), "--batch-size", "8", "--lr", "3e-3",
                 "--warmup-steps", "2", "--dropout", "0.1", "--backend", CFG.backend,
                 "--save-every", "20", "--keep", "0"] + list(extra))
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])

    def losses(self, out):
        with open(os.path.join(out, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f if '"loss"' in line]
        return {r["step"]: r["loss"] for r in rows}

    def test_runs_are_deterministic(self):
        """Two identical runs give identical losses and weights (what exact
        resume rests on)."""
        data = make_id_dataset(self.tmp)
        a, b = os.path.join(self.tmp, "a"), os.path.join(self.tmp, "b")
        self.train(data, a, 20)
        self.train(data, b, 20)
        la, lb = self.losses(a), self.losses(b)
        diff = [s for s in sorted(la) if la[s] != lb.get(s)]
        self.assertEqual(diff, [], "steps whose loss differs between identical runs: %s (first: "
                         "%r vs %r)" % (diff[:10], la[diff[0]] if diff else None,
                                        lb[diff[0]] if diff else None))
        wa = read_safetensors(os.path.join(a, "checkpoint-20", "model.safetensors"))
        wb = read_safetensors(os.path.join(b, "checkpoint-20", "model.safetensors"))
        for name in wa:
            self.assertEqual(wa[name][1], wb[name][1], "weights differ in %s" % name)

    def test_resume_is_bit_exact(self):
        """40 steps straight, and 20 more from the straight run's step-20
        checkpoint (same schedule: --max-steps 40 in both), are bit-identical
        in every weight and in the losses of steps 21-40."""
        self.check_resume(())

    def test_resume_bf16_mixed_is_bit_exact(self):
        """The same in bf16-mixed, where the resumed run's bf16 weight copies
        are made from the loaded weights and the straight run's were written
        by its AdamW updates (docs/cuda.md): the same bits either way."""
        self.check_resume(("--dtype", "bf16-mixed"))

    def check_resume(self, extra):
        data = make_id_dataset(self.tmp)
        straight, resumed = os.path.join(self.tmp, "straight"), os.path.join(self.tmp, "resumed")
        self.train(data, straight, 40, extra)
        self.train(data, resumed, 40,
                   tuple(extra) + ("--resume", os.path.join(straight, "checkpoint-20")))
        la, lb = self.losses(straight), self.losses(resumed)
        self.assertEqual(sorted(lb), list(range(21, 41)))
        diff = [s for s in range(21, 41) if la.get(s) != lb.get(s)]
        self.assertEqual(diff, [], "steps whose loss differs: %s; straight %s; resumed %s" % (
            diff[:10], [la.get(s) for s in diff[:3]], [lb.get(s) for s in diff[:3]]))
        a = read_safetensors(os.path.join(straight, "checkpoint-40", "model.safetensors"))
        b = read_safetensors(os.path.join(resumed, "checkpoint-40", "model.safetensors"))
        self.assertEqual(sorted(a), sorted(b))
        for name in a:
            self.assertEqual(a[name][1], b[name][1], "weights differ in %s" % name)
        print("resume on %s%s: steps 21-40 and every weight bit-identical"
              % (CFG.backend, " " + " ".join(extra) if extra else ""), file=sys.stderr)


def write_llama_d64(folder):
    """A two-layer Llama whose heads are 64 wide (the tensor-core attention
    kernels' size; the fixtures' heads are 8), GQA 2/1, random f32 weights,
    written with the standard library (config.json and model.safetensors)."""
    import random
    import struct
    os.makedirs(folder, exist_ok=True)
    C, H, HKV, D, F, L, V = 128, 2, 1, 64, 256, 2, 96
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C,
              "num_attention_heads": H, "num_key_value_heads": HKV, "head_dim": D,
              "intermediate_size": F, "num_hidden_layers": L, "vocab_size": V,
              "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 1,
              "eos_token_id": 2, "torch_dtype": "float32"}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,),
              "lm_head.weight": (V, C)}
    for i in range(L):
        p = "model.layers.%d." % i
        shapes.update({p + "input_layernorm.weight": (C,),
                       p + "post_attention_layernorm.weight": (C,),
                       p + "self_attn.q_proj.weight": (H * D, C),
                       p + "self_attn.k_proj.weight": (HKV * D, C),
                       p + "self_attn.v_proj.weight": (HKV * D, C),
                       p + "self_attn.o_proj.weight": (C, H * D),
                       p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                       p + "mlp.down_proj.weight": (C, F)})
    rng = random.Random(64)
    header, blobs, at = {}, [], 0
    for name in sorted(shapes):
        shape = shapes[name]
        n = 1
        for d in shape:
            n *= d
        norm = name.endswith("norm.weight")
        values = [1.0 + 0.1 * rng.uniform(-1, 1) if norm else rng.gauss(0.0, 0.08)
                  for _ in range(n)]
        blob = struct.pack("<%df" % n, *values)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return folder


class TensorCoreTest(unittest.TestCase):
    """Heads 64 wide, rows of 64 tokens: the tensor-core attention kernels
    (wgmma on compute capability 9.0, mma.sync elsewhere or with
    TRAINYARD_CUDA_ATTENTION=mma, as on the CPU emulator, where the launches
    are counted) train 3 bf16-mixed steps as cpu does."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ty_cuda_tc_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_head_dim_64_trains_as_cpu(self):
        skip_unless_usable()
        model = write_llama_d64(os.path.join(self.tmp, "llama-d64"))
        path = os.path.join(self.tmp, "data")
        rng = __import__("random").Random(7)
        with open(path + ".jsonl", "w") as f:
            for _ in range(40):
                start, step, n = rng.randrange(90), rng.choice([1, 2, 3]), rng.randrange(60, 200)
                f.write(json.dumps([(start + i * step) % 90 for i in range(n)]) + "\n")
        r = run(["data", "prepare", "--format", "ids", "--vocab-size", "96", "--eos-id", "95",
                 "--input", path + ".jsonl", "--seq-len", "64", "--out", path])
        self.assertEqual(r.returncode, 0, r.stderr)
        emulated = "emu" in os.environ.get("TRAINYARD_CUDA_DRIVER", "")
        losses = {}
        for backend in ("cpu", CFG.backend):
            out = os.path.join(self.tmp, "out-" + backend.replace(":", "-"))
            env = {"TRAINYARD_CUDA_EMU_TRACE": "1"} if emulated and backend != "cpu" else None
            r = run(["train", "--model", model, "--data", path, "--out", out, "--max-steps", "3",
                     "--batch-size", "2", "--dtype", "bf16-mixed", "--backend", backend,
                     "--log-every", "1", "--save-every", "0", "--cache-dir", "none"], env=env)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            if env:
                for kernel in ("ty_att_fwd_tc_bf16_d64", "ty_att_dq_tc_bf16_d64",
                               "ty_att_dkv_tc_bf16_d64"):
                    self.assertIn("kernel " + kernel, r.stderr)
            with open(os.path.join(out, "metrics.jsonl")) as f:
                losses[backend] = [json.loads(l)["loss"] for l in f if '"loss"' in l]
        a, b = losses["cpu"], losses[CFG.backend]
        self.assertEqual(len(a), 3)
        worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
        print("head dim 64 on %s: 3 bf16-mixed steps within %.3g of cpu (loss %.5f -> %.5f)"
              % (CFG.backend, worst, b[0], b[-1]), file=sys.stderr)
        self.assertLess(worst, 2e-3)


class FaultTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ty_cuda_fault_")
        self.tokens = os.path.join(self.tmp, "tokens.json")
        with open(self.tokens, "w") as f:
            f.write("[[1, 5, 9, 20], [3, 3, 7, 0]]")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def forward(self, env=None, backend=None, timeout=120):
        return run(["forward", "--model", os.path.join(CFG.models, "gpt2"), "--tokens",
                    self.tokens, "--out", os.path.join(self.tmp, "out.safetensors"),
                    "--backend", backend or CFG.backend], env=env, timeout=timeout)

    def fault(self, spec):
        """The environment of fault `spec`, with the test-only kernels it launches."""
        if not FATBIN_TEST or not os.path.isfile(os.path.join(FATBIN_TEST, "test.fatbin")):
            self.skipTest("no test-only fatbin folder (--fatbin-test) with test.fatbin")
        return {"TRAINYARD_CUDA_FAULT": spec, "TRAINYARD_CUDA_FATBIN_DIR": FATBIN_TEST}

    def check(self, r, *needles):
        self.assertNotEqual(r.returncode, 0, r.stderr)
        for n in needles:
            self.assertIn(n, r.stderr)
        print("  -> %s" % r.stderr.strip().splitlines()[-1][:300], file=sys.stderr)

    def test_illegal_address(self):
        r = self.forward(self.fault("illegal-address@1"))
        self.check(r, "cuda:0", "CUDA_ERROR_ILLEGAL_ADDRESS", "TRAINYARD_CUDA_SYNC=1")
        r = self.forward(dict(self.fault("illegal-address@1"), TRAINYARD_CUDA_SYNC="1"))
        self.check(r, "cuda:0", "CUDA_ERROR_ILLEGAL_ADDRESS")

    def test_fault_without_the_test_fatbin(self):
        # The plugin does not embed the test-only kernels: the hook names
        # the variable and the folder that has them.
        r = self.forward({"TRAINYARD_CUDA_FAULT": "illegal-address@1"})
        self.check(r, "cuda:0", "FAILED_PRECONDITION", "test-only", "TRAINYARD_CUDA_FATBIN_DIR",
                   "cuda-fatbin-test")

    def test_launch_failure_and_trap(self):
        r = self.forward(self.fault("launch@1"))
        self.check(r, "cuda:0", "ty_test_wild_write", "CUDA_ERROR_INVALID_VALUE")
        r = self.forward(self.fault("trap@1"))
        self.check(r, "cuda:0", "CUDA_ERROR_")

    def test_device_lost(self):
        r = self.forward({"TRAINYARD_CUDA_FAULT": "device-lost@1"})
        self.check(r, "cuda:0", "UNAVAILABLE", "lost")

    def test_out_of_memory(self):
        # Below the 64 MiB cuBLASLt workspace: opening the device fails.
        r = self.forward(backend=CFG.backend + "?memory_limit=1MiB")
        self.check(r, "RESOURCE_EXHAUSTED", "cuda:0", "cuBLASLt workspace", "memory_limit")
        # The workspace fits, a long batch's activations and buffers do not:
        # compiling (the arena) or the session's buffers fail, named.
        with open(self.tokens, "w") as f:
            json.dump([[1] * 64] * 64, f)
        r = self.forward(backend=CFG.backend + "?memory_limit=65MiB")
        self.check(r, "RESOURCE_EXHAUSTED", "cuda:0", "memory_limit")
        self.assertRegex(r.stderr, "activation arena|buffer")

    def test_fatbin_without_the_card_architecture(self):
        if not FATBIN_SM80 or not glob.glob(os.path.join(FATBIN_SM80, "*.fatbin")):
            self.skipTest("no sm_80-only fatbin was built")
        r = self.forward({"TRAINYARD_CUDA_FATBIN_DIR": FATBIN_SM80})
        if r.returncode == 0:
            self.skipTest("this card runs sm_80 code (an sm_80 card)")
        self.check(r, "FAILED_PRECONDITION", "cuda:0", "cannot run on this card",
                   "TY_CUDA_ARCHS")

    def test_checkpoint_intact_after_a_fault(self):
        data = make_id_dataset(self.tmp)
        out = os.path.join(self.tmp, "run")
        # Runs: 1 per step plus evaluations; fault well after the step-5 save.
        r = run(["train", "--model", os.path.join(CFG.models, "gpt2"), "--data", data, "--out",
                 out, "--max-steps", "20", "--batch-size", "8", "--save-every", "5",
                 "--eval-every", "0", "--backend", CFG.backend],
                env=self.fault("illegal-address@8"), timeout=300)
        self.check(r, "CUDA_ERROR_ILLEGAL_ADDRESS")
        ckpts = sorted(glob.glob(os.path.join(out, "checkpoint-*")))
        self.assertTrue(ckpts, "no checkpoint left")
        r = run(["forward", "--model", ckpts[-1], "--tokens", self.tokens, "--out",
                 os.path.join(self.tmp, "after.safetensors"), "--backend", "cpu"])
        self.assertEqual(r.returncode, 0, r.stderr)


def main():
    global FATBIN_SM80, FATBIN_TEST, CUDA_STUB
    argv = sys.argv[1:]
    for flag in ("--fatbin-sm80", "--fatbin-test", "--cuda-stub"):
        if flag in argv:
            i = argv.index(flag)
            if flag == "--fatbin-sm80":
                FATBIN_SM80 = argv[i + 1]
            elif flag == "--fatbin-test":
                FATBIN_TEST = argv[i + 1]
            else:
                CUDA_STUB = argv[i + 1]
            del argv[i:i + 2]
    rest = parse_common(argv + ["--backend", "cuda:0"])
    suites = [a for a in rest if not a.startswith("-")]
    if suites != ["DevicesTest"]:
        skip_unless_usable()
    sys.exit(unittest_exit.run([sys.argv[0]] + rest))


if __name__ == "__main__":
    main()
