#!/usr/bin/env python3
"""End-to-end tests of "every input validated" (Python standard library only).

usage: test_inputs_cli.py --trainyard EXE --models DIR --tokenizers DIR [unittest args]

- ReadTest: every file Trainyard reads whole has a cap and refuses NUL bytes
  in text: /dev/zero as a tokenizer, a config.json, a --config file or a
  data input fails at once (it used to read until the kernel killed the
  host's memory, or spin forever); an endless pipe stops at the cap named in
  the message; a finite pipe works; a NUL byte is an error at its offset,
  never an end of line or file.
- ModelTest: config.json is checked against the checkpoint before any graph
  is built (n_layer = 100000 or 2^63-1 against a 2-layer checkpoint fails in
  well under a second, naming the tensor); sizes past 64-bit arithmetic or
  the device's memory are refused; NaN/Inf weights are refused by forward,
  generate and train (naming tensor and element) unless --allow-nonfinite,
  which loads them with a loud warning.
- ConfigTest: conflicting RoPE forms, unknown enum values and token ids
  outside the vocabulary (config.json, compile --eos-id) are refused.
- TokenizerTest: an empty vocabulary and merges whose result is not in the
  vocabulary are refused; `data prepare --format ids` records its format.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

CFG = None
FAST = 10  # seconds: every refusal here is immediate; the old behaviour never ended


def run(args, data=None, env=None, timeout=FAST):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([CFG.trainyard] + args, input=data, capture_output=True, text=True,
                          env=full_env, timeout=timeout)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), 8 + n, bytearray(raw)


def poke_f32(path, tensor, index, value):
    """Writes float32 `value` at element `index` of `tensor` in a safetensors file."""
    header, base, raw = read_safetensors(path)
    entry = header[tensor]
    assert entry["dtype"] == "F32", entry
    at = base + entry["data_offsets"][0] + 4 * index
    raw[at:at + 4] = struct.pack("<f", value)
    with open(path, "wb") as f:
        f.write(raw)


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ty_inputs_test_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def model(self, family="gpt2", edit=None):
        """A copy of a fixture model; `edit(config_dict)` changes its config.json."""
        dst = self.path("model-" + family)
        shutil.copytree(os.path.join(CFG.models, family), dst)
        if edit:
            cfg_path = os.path.join(dst, "config.json")
            with open(cfg_path) as f:
                cfg = json.load(f)
            edit(cfg)
            with open(cfg_path, "w") as f:
                json.dump(cfg, f)
        return dst

    def tokens(self, ids=((1, 5, 9, 20),)):
        p = self.path("tokens.json")
        with open(p, "w") as f:
            json.dump([list(r) for r in ids], f)
        return p

    def forward(self, model, *extra):
        return run(["forward", "--model", model, "--tokens", self.tokens(), "--out",
                    self.path("out.safetensors")] + list(extra))

    def fails(self, r, rc, *needles):
        self.assertEqual(r.returncode, rc, r.stderr)
        for n in needles:
            self.assertIn(n, r.stderr)

    def ids_dataset(self, vocab=96):
        src = self.path("ids.jsonl")
        with open(src, "w") as f:
            for i in range(40):
                f.write(json.dumps([(i + k) % (vocab - 1) for k in range(12)]) + "\n")
        out = self.path("data")
        r = run(["data", "prepare", "--format", "ids", "--vocab-size", str(vocab), "--eos-id",
                 str(vocab - 1), "--input", src, "--seq-len", "8", "--out", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        return out


class ReadTest(Base):
    def test_dev_zero_tokenizer_fails_at_once(self):
        r = run(["tokenize", "--tokenizer", "/dev/zero"], data="hi")
        self.fails(r, 1, "tokenizer file '/dev/zero' holds a NUL byte at offset 0")

    def test_dev_zero_config_json_fails_at_once(self):
        model = self.model()
        cfg = os.path.join(model, "config.json")
        os.remove(cfg)
        os.symlink("/dev/zero", cfg)
        self.fails(self.forward(model), 1, "config.json' holds a NUL byte at offset 0")

    def test_dev_zero_train_config_fails_at_once(self):
        data = self.ids_dataset()
        r = run(["train", "--config", "/dev/zero", "--preset", "gpt2-tiny", "--data", data,
                 "--out", self.path("run")])
        self.fails(r, 2, "config file '/dev/zero' holds a NUL byte at offset 0")

    def test_nul_in_train_config_is_not_an_end_of_line(self):
        cfg = self.path("run.cfg")
        with open(cfg, "wb") as f:
            f.write(b"preset = gpt2-tiny\nmax_steps = 1\x00\nlr = 1e-3\n")
        r = run(["train", "--config", cfg, "--data", self.ids_dataset(), "--out",
                 self.path("run")])
        self.fails(r, 2, "holds a NUL byte at offset 32")

    def test_long_line_in_train_config_is_one_line(self):
        # fgets(2048) cut long lines in two; the tail became a line of its own.
        cfg = self.path("run.cfg")
        with open(cfg, "w") as f:
            f.write("# " + "x" * 3000 + "\nbogus_option = 1\n")
        r = run(["train", "--config", cfg, "--preset", "gpt2-tiny", "--data", self.ids_dataset(),
                 "--out", self.path("run")])
        self.fails(r, 2, "run.cfg:2: unknown option 'bogus_option'")

    def test_endless_pipe_stops_at_the_cap(self):
        fifo = self.path("fifo")
        os.mkfifo(fifo)
        stop = threading.Event()

        def writer():
            try:
                with open(fifo, "wb") as f:
                    chunk = b"{" * 65536
                    while not stop.is_set():
                        f.write(chunk)
            except (BrokenPipeError, OSError):
                pass

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        try:
            r = run(["tokenize", "--tokenizer", fifo], data="hi",
                    env={"TRAINYARD_MAX_TOKENIZER_BYTES": "1M"})
        finally:
            stop.set()
        self.fails(r, 1, "RESOURCE_EXHAUSTED", "larger than 1 MiB",
                   "TRAINYARD_MAX_TOKENIZER_BYTES")

    def test_tokenizer_through_a_pipe_works(self):
        fifo = self.path("fifo")
        os.mkfifo(fifo)
        src = os.path.join(CFG.tokenizers, "gpt2", "tokenizer.json")

        def writer():
            with open(fifo, "wb") as out, open(src, "rb") as f:
                shutil.copyfileobj(f, out)

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        r = run(["tokenize", "--tokenizer", fifo], data="Hello world")
        t.join()
        self.assertEqual(r.returncode, 0, r.stderr)
        ref = run(["tokenize", "--tokenizer", src], data="Hello world")
        self.assertEqual(r.stdout, ref.stdout)

    def test_bad_cap_setting_is_named(self):
        r = run(["tokenize", "--tokenizer", os.path.join(CFG.tokenizers, "gpt2",
                                                          "tokenizer.json")],
                data="x", env={"TRAINYARD_MAX_TOKENIZER_BYTES": "lots"})
        self.fails(r, 1, "TRAINYARD_MAX_TOKENIZER_BYTES='lots' is not a size")

    def test_nul_on_stdin(self):
        tok = os.path.join(CFG.tokenizers, "gpt2", "tokenizer.json")
        r = run(["tokenize", "--tokenizer", tok], data="ab\0cd")
        self.fails(r, 1, "input 'stdin' holds a NUL byte at offset 2")

    def test_data_inputs_devices_pipes_and_nul(self):
        tok = os.path.join(CFG.tokenizers, "gpt2", "tokenizer.json")
        base = ["data", "prepare", "--tokenizer", tok, "--format", "lines", "--seq-len", "8"]
        # /dev/zero used to look like an empty file (st_size 0).
        r = run(base + ["--input", "/dev/zero", "--out", self.path("d0")])
        self.fails(r, 1, "input '/dev/zero' holds a NUL byte at offset 0")
        text = self.path("nul.txt")
        with open(text, "wb") as f:
            f.write(b"one line\nanother\x00line\n")
        r = run(base + ["--input", text, "--out", self.path("d1")])
        self.fails(r, 1, "holds a NUL byte at offset 16")
        fifo = self.path("lines.fifo")
        os.mkfifo(fifo)

        def writer():
            with open(fifo, "w") as f:
                for i in range(50):
                    f.write("line number %d of a piped corpus\n" % i)

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        r = run(base + ["--input", fifo, "--out", self.path("d2")])
        t.join()
        self.assertEqual(r.returncode, 0, r.stderr)
        info = run(["data", "info", self.path("d2")])
        self.assertEqual(info.returncode, 0, info.stderr)

    def test_xfail_list_is_not_cut_at_1_mib(self):
        big = self.path("xfail.txt")
        with open(big, "w") as f:
            f.write("# padding\n" * 110000)  # 1.1 MB of comments
            f.write("gelu f32 forward\n")    # no reason: an error past the first MiB
        r = run(["conform", "--backend", "cpu", "--ops", "gelu", "--xfail", big])
        self.fails(r, 2, "expected-failure list", "larger than 1 MiB")


class ModelTest(Base):
    def test_many_more_layers_than_the_checkpoint(self):
        for family, key, value in (("gpt2", "n_layer", 100000),
                                   ("llama", "num_hidden_layers", 100000)):
            model = self.model(family, lambda c: c.__setitem__(key, value))
            start = time.monotonic()
            r = self.forward(model)
            self.assertLess(time.monotonic() - start, 5)
            layer = "transformer.h.2.ln_1.weight" if family == "gpt2" else \
                "model.layers.2.input_layernorm.weight"
            self.fails(r, 1, "NOT_FOUND", "has no tensor '%s'" % layer, "100000 layers")
            r = run(["generate", "--model", model, "--prompt-ids", "1,2", "--max-new-tokens", "2"])
            self.fails(r, 1, "has no tensor '%s'" % layer)

    def test_layer_count_past_64_bits(self):
        for family, key in (("gpt2", "n_layer"), ("llama", "num_hidden_layers")):
            model = self.model(family, lambda c: c.__setitem__(key, 2**63 - 1))
            r = self.forward(model)
            self.fails(r, 1, "INVALID_ARGUMENT", "9223372036854775807 layers", "64-bit")

    def test_fewer_layers_and_wrong_shapes_are_named(self):
        model = self.model("gpt2", lambda c: c.__setitem__("n_layer", 1))
        self.fails(self.forward(model), 1, "checkpoint tensor 'transformer.h.1.",
                   "not a parameter")
        model = self.model("llama", lambda c: c.__setitem__("intermediate_size", 48))
        self.fails(self.forward(model), 1, "model.layers.0.mlp.gate_proj.weight",
                   "[64,32]", "[48,32]")

    def test_sizes_past_the_device_memory(self):
        # A config alone (compile needs no weights): 64-bit arithmetic copes,
        # no device does.
        model = self.model("llama", lambda c: c.update(hidden_size=65536, intermediate_size=262144,
                                                       num_hidden_layers=4096, head_dim=64,
                                                       num_attention_heads=1024,
                                                       num_key_value_heads=1024))
        os.remove(os.path.join(model, "model.safetensors"))
        r = run(["compile", "--backend", "dataflow", "--model", model, "--batch-size", "1",
                 "--seq-len", "8", "--out", self.path("step.tyart")])
        self.fails(r, 1, "RESOURCE_EXHAUSTED", "parameters", "GiB of device dataflow")

    def nan_model(self, family="gpt2", value=float("nan"), index=7):
        model = self.model(family)
        tensor = "transformer.h.1.mlp.c_fc.weight" if family == "gpt2" else \
            "model.layers.1.mlp.up_proj.weight"
        poke_f32(os.path.join(model, "model.safetensors"), tensor, index, value)
        return model, tensor

    def test_nonfinite_weights_forward(self):
        for value, word in ((float("nan"), "NaN"), (float("inf"), "+inf"),
                            (float("-inf"), "-inf")):
            model, tensor = self.nan_model(value=value)
            r = self.forward(model)
            self.fails(r, 1, "tensor '%s' holds %s at element 7" % (tensor, word),
                       "--allow-nonfinite")
            shutil.rmtree(model)
        model, tensor = self.nan_model("llama")
        r = self.forward(model, "--allow-nonfinite")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("WARNING: 1 tensor(s)", r.stderr)
        self.assertIn(tensor, r.stderr)

    def test_conversion_overflow_is_named(self):
        model, tensor = self.nan_model(value=70000.0)
        self.assertEqual(self.forward(model).returncode, 0)  # finite in f32
        r = self.forward(model, "--dtype", "f16")
        self.fails(r, 1, "tensor '%s' holds 70000 at element 7, which overflows f16" % tensor)

    def test_nonfinite_weights_generate(self):
        model, tensor = self.nan_model()
        args = ["generate", "--model", model, "--prompt-ids", "1,2,3", "--max-new-tokens", "4"]
        self.fails(run(args), 1, "tensor '%s' holds NaN" % tensor)
        r = run(args + ["--allow-nonfinite"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("WARNING", r.stderr)

    def test_nonfinite_weights_train(self):
        model, tensor = self.nan_model()
        data = self.ids_dataset()
        base = ["train", "--model", model, "--data", data, "--max-steps", "2", "--batch-size", "2"]
        # Refused at load, naming the tensor (it used to fail later on a NaN loss).
        r = run(base + ["--out", self.path("run1")], timeout=120)
        self.fails(r, 1, "tensor '%s' holds NaN at element 7" % tensor)
        r = run(base + ["--out", self.path("run2"), "--allow-nonfinite"], timeout=120)
        self.assertIn("WARNING: 1 tensor(s)", r.stderr)


class ConfigTest(Base):
    def test_conflicting_rope_forms(self):
        def edit(c):
            c["rope_scaling"] = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 256}
        model = self.model("llama3", edit)  # its rope_parameters say factor 8
        self.fails(self.forward(model), 1, "rope_scaling and rope_parameters disagree on factor")

        def bad_legacy(c):
            c["rope_scaling"] = {"rope_type": "llama3", "factor": -1}
        model = self.model("llama", bad_legacy)
        shutil.rmtree(self.path("model-llama3"))
        self.fails(self.forward(model), 1, "'rope_scaling.factor' must be a positive number")

    def test_unknown_enum_values(self):
        for key, value, code in (("hidden_act", "silly", "INVALID_ARGUMENT"),
                                 ("hidden_act", 3, "INVALID_ARGUMENT"),
                                 ("dtype", "float99", "INVALID_ARGUMENT"),
                                 ("architectures", ["LlamaForTokenClassification"],
                                  "UNIMPLEMENTED")):
            model = self.model("llama", lambda c: c.__setitem__(key, value))
            self.fails(self.forward(model), 1, code, "'%s'" % key)
            shutil.rmtree(model)

    def test_eos_outside_the_vocabulary(self):
        model = self.model("gpt2", lambda c: c.__setitem__("eos_token_id", 96))
        self.fails(self.forward(model), 1, "'eos_token_id' holds id 96", "96 tokens")
        base = ["compile", "--backend", "dataflow", "--preset", "gpt2-tiny", "--vocab-size", "96",
                "--seq-len", "8", "--batch-size", "2", "--out", self.path("a.tyart")]
        self.fails(run(base + ["--eos-id", "96"]), 2, "--eos-id 96 is outside the vocabulary")
        r = run(base + ["--eos-id", "0"], timeout=120)  # 0 is an id, not "unset"
        self.assertEqual(r.returncode, 0, r.stderr)
        self.fails(run(["compile", "--backend", "dataflow", "--model",
                        os.path.join(CFG.models, "gpt2"), "--eos-id", "3", "--seq-len", "8",
                        "--out", self.path("b.tyart")]), 2, "--eos-id describe a --preset")

    def test_stop_at_eos_needs_an_eos(self):
        model = self.model("gpt2", lambda c: c.pop("eos_token_id"))
        r = run(["generate", "--model", model, "--prompt-ids", "1", "--max-new-tokens", "2",
                 "--stop-at-eos"])
        self.fails(r, 1, "--stop-at-eos", "has no eos_token_id")


class TokenizerTest(Base):
    def write(self, name, obj):
        p = self.path(name)
        with open(p, "w") as f:
            json.dump(obj, f)
        return p

    def test_empty_vocabulary(self):
        tok = self.write("empty.json", {"model": {"type": "BPE", "vocab": {}, "merges": []}})
        self.fails(run(["tokenize", "--tokenizer", tok], data="hi"), 1, "model.vocab is empty")

    def test_merge_result_outside_the_vocabulary(self):
        tok = self.write("m.json", {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1},
                                              "merges": ["a b"]}})
        self.fails(run(["tokenize", "--tokenizer", tok], data="ab"), 1,
                   "merged token \"ab\" is not in model.vocab")

    def test_ids_dataset_records_its_format(self):
        data = self.ids_dataset()
        with open(os.path.join(data, "dataset.json")) as f:
            self.assertEqual(json.load(f)["input_format"], "ids")


def main():
    global CFG
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--tokenizers", required=True)
    CFG, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
