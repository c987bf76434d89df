#!/usr/bin/env python3
"""Every option does what it says (issue 12): the audit of every option of
every `trainyard` command, as tests. Python standard library only.

usage: test_options_cli.py --trainyard EXE --models DIR --source DIR [unittest args]

AUDIT below names, for each command, every option its --help mentions and
the test that shows the option's effect (or that the option is refused
where it would have none). AuditTableTest holds the table to the code: the
options each command parses (read from its source) must all be in its
--help, every option its --help mentions must be in AUDIT, and every test
AUDIT names must exist. A new option without an effect test fails here.

The other classes drive the options, each run against a baseline run
without it, and check the difference the option makes (or its refusal
where another option makes it ineffective).
"""
import json
import os
import re
import sys
import unittest

import cli_util  # noqa: E402  (beside this file)
from cli_util import WORDS, make_corpus, make_ids_dataset, run, write  # noqa: E402,F401

# command -> option -> "Class.test_method" (this file) or "file.py:Class.test_method"
# (another test of tests/apps or tests/conform), or "mention:<command>" for another
# command's option that a --help names in its text; a tuple of these where one
# option's values are held by several tests. Options a --help mentions only
# to refuse them ("set by compare") are tested for the refusal.
AUDIT = {
    "(global)": {
        "--plugin-path": "GlobalOptionsTest.test_plugin_path_and_verbose",
        "--verbose": "GlobalOptionsTest.test_plugin_path_and_verbose",
        "--version": "GlobalOptionsTest.test_version",
    },
    "devices": {"--json": "DevicesOptionsTest.test_json"},
    "data prepare": {o: "PrepareOptionsTest.test_each_option" for o in (
        "--tokenizer", "--input", "--seq-len", "--out", "--format", "--vocab-size", "--eos-id",
        "--loss-weights", "--text-field", "--chat-template", "--val-fraction", "--seed", "--eos",
        "--shard-rows", "--force")},
    "data train-tokenizer": {o: "TrainTokenizerOptionsTest.test_each_option" for o in (
        "--input", "--vocab-size", "--out", "--min-frequency", "--special", "--format",
        "--text-field", "--force")},
    "data info": {"--verify": "test_data_cli.py:PrepareTest.test_info_finds_damage"},
    "ckpt split": {"--ranks": "test_distributed_cli.py:CkptTest.test_split_and_merge"},
    "ckpt diff": {
        "--tol": "test_ckpt_diff_cli.py:DiffTest.test_tolerances",
        "--rtol": "test_ckpt_diff_cli.py:DiffTest.test_tolerances",
        "--top": "test_ckpt_diff_cli.py:DiffTest.test_top",
        "--json": "test_ckpt_diff_cli.py:DiffTest.test_json",
        "--weights-only": "test_ckpt_diff_cli.py:DiffTest.test_weights_only"},
    "train": dict(
        {o: "TrainOptionsTest.test_schedule_and_optimizer_options" for o in (
            "--lr", "--min-lr", "--warmup-steps", "--schedule", "--optimizer", "--weight-decay",
            "--beta1", "--beta2", "--eps", "--momentum", "--clip", "--decay-all")},
        **{o: "TrainOptionsTest.test_run_shape_options" for o in (
            "--model", "--preset", "--data", "--out", "--backend", "--dtype", "--batch-size",
            "--seq-len", "--grad-accum", "--epochs", "--max-steps", "--dropout", "--seed",
            "--config")},
        **{o: "TrainOptionsTest.test_eval_save_log_options" for o in (
            "--eval-every", "--eval-batches", "--save-every", "--keep", "--log-every",
            "--cache-dir", "--retry-failed")},
        **{o: "TrainSampleTest.test_samples_at_evaluations_and_checkpoints" for o in (
            "--sample-tokens", "--sample-prompt")},
        **{"--tokenizer":
               "test_inputs_cli.py:TokenizerTest.test_tokenizer_other_than_the_datas_is_refused",
           "--resume": ("test_train_cli.py:ResumeTest.test_resume_is_bit_identical",
                        # latest without a checkpoint, auto
                        "test_run_safety.py:RunFolderTest.test_resume_latest_needs_a_checkpoint"),
           "--overwrite": "test_run_safety.py:RunFolderTest.test_overwrite_deletes_only_the_run",
           "--allow-done": "test_run_safety.py:RunFolderTest.test_resume_past_the_end_is_said",
           "--dump-graph": "test_bringup_cli.py:CheckTest.test_dump_graph_on_train_and_compile",
           "--allow-nonfinite": "test_inputs_cli.py:ModelTest.test_nonfinite_weights_train",
           "--check-numerics": ("test_numerics_cli.py:TrainTest.test_backward_overflow_is_named",
                                "test_numerics_cli.py:SampledTest."
                                "test_checks_steps_1_4_7_and_changes_no_loss"),
           "--artifact": "test_dataflow_cli.py:ResumeTest.test_resume_is_bit_identical",
           "--control-registry":
               "test_control_cli.py:ControlTest.test_abort_keeps_the_previous_checkpoint"},
        **{o: "test_eval_cli.py:TrainEvalTest.test_accuracy_logged_and_min_eval_acc" for o in (
            "--eval-data", "--eval-choices", "--min-eval-acc")},
        **{o: "test_memory_cli.py:LeverTest.test_llama" for o in (
            "--recompute", "--loss-chunk", "--fused-optimizer")},
        **{"--mlp-chunk": "test_mlp_chunk_cli.py:CurveTest.test_llama",
           "--max-positions": "test_train_cli.py:PositionsTest.test_max_positions"},
        **{"--offload": "test_memory_cli.py:BackendTest.test_cpu_refuses_offload",
           "--memory-limit": "test_memory_cli.py:RefuseTest.test_7b_without_levers_is_refused_on_24_gib",
           "--plan-only": "test_memory_cli.py:RefuseTest.test_train_plan_only"},
        **{o: "test_memory_cli.py:OptionsTest.test_refusals" for o in (
            "--relative-step", "--warmup-init", "--clip-threshold", "--decay-rate")},
        **{o: "test_memory_cli.py:AdafactorTest.test_resume_is_bit_identical" for o in (
            "--scale-parameter", "--adafactor-eps1", "--adafactor-eps2")},
        **{"--distributed": "test_distributed_cli.py:RefuseTest.test_bad_inputs",
           "--dist-timeout": "test_distributed_cli.py:FailureTest.test_hung_rank_is_named",
           "--zero": "test_distributed_cli.py:ZeroTest.test_zero_matches_plain_data_parallel",
           "--tp": "test_tensor_parallel_cli.py:MatchTest.test_llama_gqa",
           "--cp": "test_context_parallel_cli.py:MatchTest.test_llama_gqa"},
        **{o: "test_pipeline_cli.py:PipelineTest.test_llama_adamw" for o in (
            "--pp", "--pp-schedule")},
        **{"--pp-virtual": "test_pipeline_cli.py:RefuseTest.test_bad_layouts"},
        **{"--deterministic":
               "test_deterministic_train_cli.py:MatchTest.test_splits_of_one_global_batch",
           "--fallback": "test_bringup_cli.py:FallbackOptionTest.test_train_same_losses"}),
    "compile": dict({o: "CompileOptionsTest.test_each_option" for o in (
        "--backend", "--model", "--preset", "--vocab-size", "--data", "--batch-size",
        "--seq-len", "--inference", "--optimizer", "--dtype", "--dropout", "--decay-all",
        "--grad-accum", "--out", "--cache-dir", "--retry-failed", "--lr")},
        **{"--artifact": "mention:train",
           "--max-positions": "test_train_cli.py:PositionsTest.test_max_positions",
           "--dump-graph": "test_bringup_cli.py:CheckTest.test_dump_graph_on_train_and_compile",
           "--data-parallel": "test_distributed_cli.py:DataflowTest.test_artifact_for_two_ranks"},
        **{o: "test_memory_cli.py:PlanTest.test_levers_shrink_the_plan" for o in (
            "--recompute", "--loss-chunk", "--fused-optimizer", "--plan-only",
            "--memory-limit", "--clip")},
        **{"--mlp-chunk":
               "test_mlp_chunk_cli.py:PlanTest.test_chunked_mlp_shrinks_the_activations",
           "--plan-detail": "test_mlp_chunk_cli.py:PlanTest.test_plan_detail_names_the_peak"},
        **{o: "test_memory_cli.py:BackendTest.test_dataflow" for o in (
            "--offload", "--relative-step", "--scale-parameter", "--warmup-init",
            "--clip-threshold", "--decay-rate", "--adafactor-eps1", "--adafactor-eps2",
            "--beta1")}),
    "check": dict({o: "CheckOptionsTest.test_each_option" for o in (
        "--backend", "--model", "--preset", "--vocab-size", "--data", "--batch-size", "--seq-len",
        "--train", "--dtype", "--optimizer", "--dropout", "--grad-accum", "--decay-all",
        "--json")},
        **{"--max-positions": "test_train_cli.py:PositionsTest.test_max_positions",
           "--dump-graph":
               "test_bringup_cli.py:CheckTest.test_partial_plugin_lists_every_missing_op",
           "--grads": "mention:forward",
           "--fallback": "test_bringup_cli.py:FallbackOptionTest.test_check_same_output"}),
    "generate": dict({o: "GenerateOptionsTest.test_each_option" for o in (
        "--model", "--prompt", "--prompt-ids", "--max-new-tokens", "--greedy", "--temperature",
        "--top-k", "--top-p", "--seed", "--stop-at-eos", "--backend", "--dtype", "--json")},
        **{"--allow-nonfinite": "test_inputs_cli.py:ModelTest.test_nonfinite_weights_generate",
           "--check-numerics": "test_numerics_cli.py:GenerateTest.test_prompt_overflow_is_named",
           "--deterministic": "test_deterministic_cli.py:GenerateTest.test_batched_equals_alone",
           "--speculate": "test_deterministic_cli.py:GenerateTest.test_speculate_changes_nothing"},
        **{o: "GenerateOptionsTest.test_input_options" for o in (
            "--input", "--output", "--max-batch", "--ctx", "--prefill-chunk",
            "--prefill-budget")}),
    "serve": dict({o: "test_serve_cli.py:OptionsTest.test_each_option" for o in (
        "--model", "--dtype", "--host", "--port", "--model-name", "--chat-template",
        "--prefill-chunk", "--prefill-budget", "--ctx", "--max-batch")},
        **{"--backend": "test_serve_cli.py:LimitsTest.test_internal_error",
           "--api-key": "test_serve_cli.py:LimitsTest.test_api_key",
           "--max-body": "test_serve_cli.py:LimitsTest.test_body_too_large",
           "--max-queue": "test_serve_cli.py:LimitsTest.test_queue_full_and_timeout",
           "--kv-cache-memory": "test_serve_load.py:PoolTest.test_request_larger_than_the_pool",
           "--kv-block-size": "test_serve_load.py:PoolTest.test_prefix_cache_option",
           "--no-prefix-cache": "test_serve_load.py:PoolTest.test_prefix_cache_option",
           "--speculate": "test_serve_cli.py:OptionsTest.test_each_option",
           "--request-timeout": "test_serve_cli.py:LimitsTest.test_queue_full_and_timeout",
           "--shutdown-timeout": "test_serve_cli.py:ShutdownTest.test_deadline_cancels",
           "--read-timeout": "test_serve_cli.py:HttpTest.test_read_timeout",
           "--max-connections": "test_serve_cli.py:OptionsTest.test_connection_limits",
           "--max-connections-per-client":
               "test_serve_cli.py:OptionsTest.test_connection_limits",
           "--deterministic": "test_deterministic_cli.py:ServeTest.test_llama_gqa_rope"}),
    "eval": dict({o: "test_eval_cli.py:EvalTest.test_hand_checked_accuracy" for o in (
        "--model", "--data", "--choices", "--out")},
        **{o: "test_eval_cli.py:EvalTest.test_bad_inputs" for o in ("--backend", "--dtype")},
        **{"--batch-size": "test_eval_cli.py:EvalTest.test_loglik_equals_forward",
           "--dataset": "test_eval_cli.py:EvalTest.test_dataset_perplexity",
           "--deterministic": "test_deterministic_cli.py:EvalServeTest.test_eval_equals_serve",
           "--fallback":
               "test_bringup_cli.py:FallbackOptionTest.test_forward_and_eval_same_output"}),
    "control": {"--json": "test_control_cli.py:ControlTest.test_list_status_save_stop",
                "--registry": "test_control_cli.py:ControlTest.test_abort_keeps_the_previous_checkpoint",
                "--control-registry": "mention:train", "--out": "mention:train"},
    "forward": dict({o: "ForwardOptionsTest.test_each_option" for o in (
        "--model", "--tokens", "--out", "--backend", "--dtype", "--grads", "--dump-graph")},
        **{"--allow-nonfinite": "test_inputs_cli.py:ModelTest.test_nonfinite_weights_forward",
           "--check-numerics": "test_numerics_cli.py:ForwardTest.test_forward_overflow_is_named",
           "--deterministic":
               "test_deterministic_cli.py:GenerateTest.test_forward_line_only_with_flag",
           "--fallback":
               "test_bringup_cli.py:FallbackOptionTest.test_forward_and_eval_same_output"}),
    "tokenize": {o: "TokenizeOptionsTest.test_each_option" for o in (
        "--tokenizer", "--decode", "--json", "--no-special")},
    "compare": dict({o: "CompareOptionsTest.test_each_option" for o in (
        "--backends", "--steps", "--out", "--tolerance", "--config", "--model", "--preset",
        "--data", "--batch-size", "--lr", "--dropout", "--backend", "--max-steps", "--epochs",
        "--resume")},
        **{"--overwrite":
               "test_run_safety.py:RunFolderTest.test_compare_keeps_an_earlier_comparison",
           "--per-layer": ("test_compare_layers_cli.py:PerLayerTest.test_cpu_against_cpu_agrees",
                           "test_compare_layers_cli.py:UsageTest.test_refusals")}),
    "conform": dict({o: "ConformOptionsTest.test_each_option" for o in (
        "--backend", "--ops", "--dtype", "--direction", "--seed", "--tier", "--xfail", "--json",
        "--list")},
        **{o: "test_conform_cli.py:ReferenceTest.test_summary_and_only_failures" for o in (
            "--summary", "--only-failures")},
        **{o: "test_conform_cli.py:ModelTiersTest.test_bisect_names_the_planted_kernel"
           for o in ("--bisect", "--against")},
        **{"--model": "test_conform_cli.py:ModelTiersTest.test_tiers_catch_wrong_kernels",
           "--steps": "test_conform_cli.py:ModelTiersTest.test_step_tier_passes",
           "--tolerance": "ConformOptionsTest.test_model_tier_options"}),
}

HELP_ARGS = {"(global)": ["--help"]}






def read_bytes(path):
    """A file's bytes; a safetensors file's without its run's random id."""
    return cli_util.checkpoint_bytes(path)


def safetensors_header(path):
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(size))


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]








class Base(cli_util.TempDirTest):
    def ok(self, args, stdin=None, env=None):
        r = run(args, stdin, env)
        self.assertEqual(r.returncode, 0, "trainyard %s\n%s" % (" ".join(args), r.stderr[-3000:]))
        return r

    def differ(self, a, b, option):
        """Two outputs (bytes) that `option` must have made different."""
        self.assertTrue(a != b, "%s changed nothing in the output" % option)

    def refused(self, args, *needles, rc=2):
        r = run(args)
        self.assertEqual(r.returncode, rc, "trainyard %s accepted or failed otherwise:\n%s" % (
            " ".join(args), r.stderr[-2000:]))
        for needle in needles:
            self.assertIn(needle, r.stderr)
        return r


# ---- the table against the code --------------------------------------------


def help_options(command):
    args = HELP_ARGS.get(command, command.split() + ["--help"])
    r = run(args)
    assert r.returncode == 0, r.stderr
    found = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", r.stdout))
    found.discard("--help")
    if command == "(global)":
        found = {o for o in found if o in ("--plugin-path", "--verbose", "--version")}
    return found


def source(*parts):
    with open(os.path.join(cli_util.CFG.source, *parts), encoding="utf-8") as f:
        return f.read()


def getopt_names(text, function):
    """The long options of the getopt table inside C function `function`."""
    start = text.index(function)
    table = text[start:text.index("{NULL, 0, NULL, 0}", start)]
    return {"--" + n for n in re.findall(r'\{"([a-z][a-z0-9-]*)",\s*(?:no|required)_argument',
                                         table)} - {"--help"}


def parsed_options(command):
    """What each command's code parses, read from its source."""
    app = ("apps", "trainyard")
    if command == "(global)":
        text = source(*app, "main.c")
        return {o for o in ("--plugin-path", "--verbose", "--version") if '"%s"' % o in text}
    if command == "devices":
        return getopt_names(source(*app, "cmd_devices.c"), "int ty_cmd_devices")
    if command == "data prepare":
        return getopt_names(source(*app, "data", "cmd_data.c"), "static int ty_prepare_parse")
    if command == "data train-tokenizer":
        return getopt_names(source(*app, "data", "cmd_data_tokenizer.c"),
                            "int ty_cmd_data_train_tokenizer")
    if command == "data info":
        text = source(*app, "data", "cmd_data_info.c")
        body = text[text.index("int ty_cmd_data_info"):]
        return set(re.findall(r'strcmp\(argv\[i\], "(--[a-z-]+)"\)', body)) - {"--help"}
    if command in ("train", "compare"):
        names = {"--" + n.replace("_", "-") for n in re.findall(
            r"^\s+TY_[SIFBU]\((\w+),", source(*app, "train", "train_config.c"), re.M)} | {"--config"}
        if command == "compare":
            # compare's own options: its table for train/train_args.h
            names |= {"--" + k for k in re.findall(r'\{"([a-z-]+)", TY_TRAIN_ARG_',
                                                    source(*app, "compare", "cmd_compare.c"))}
        return names
    if command in ("compile", "check"):
        # graph_args.c's options (not the runtime hyperparameters both refuse:
        # CompileOptionsTest), and the command's own flags and valued options
        text = source(*app, "graph_args.c")
        table = text[text.index("ty_graph_args_keys[] = {"):]
        names = set(re.findall(r'"([a-z][a-z-]*)"', table[:table.index("};")]))
        own = source(*app, "cmd_%s.c" % command)
        for m in re.finditer(r'(?:flags|own)\[\] = \{([^}]*)\}', own):
            names |= set(re.findall(r'"([a-z][a-z-]*)"', m.group(1)))
        if command == "check":  # refused: check compiles nothing (CheckOptionsTest)
            names -= {"cache-dir", "retry-failed"}
        if command == "compile":  # refused: no mixed runs (FallbackOptionTest)
            names -= {"fallback"}
        return {"--" + n for n in names}
    if command == "ckpt split":
        return getopt_names(source(*app, "ckpt", "cmd_ckpt.c"), "int ty_cmd_ckpt")
    if command == "ckpt diff":
        return getopt_names(source(*app, "ckpt", "ckpt_diff.c"), "int ty_cmd_ckpt_diff")
    if command == "eval":
        return getopt_names(source(*app, "eval", "cmd_eval.c"), "int ty_cmd_eval")
    if command == "control":
        return getopt_names(source(*app, "control", "cmd_control.c"), "int ty_cmd_control")
    if command == "serve":
        return getopt_names(source(*app, "serve", "cmd_serve.c"), "static int ty_serve_parse")
    function = {"generate": "static int ty_generate_parse", "forward": "int ty_cmd_forward",
                "tokenize": "int ty_cmd_tokenize", "conform": "int ty_cmd_conform"}[command]
    folder = {"generate": ("generate",), "conform": ("conform",)}.get(command, ())
    return getopt_names(source(*app, *folder, "cmd_%s.c" % command), function)


class AuditTableTest(unittest.TestCase):
    def test_every_parsed_option_is_documented_and_audited(self):
        for command, table in AUDIT.items():
            with self.subTest(command=command):
                helped, parsed = help_options(command), parsed_options(command)
                if command == "compare":
                    # compare takes every train option; its help names the ones it sets
                    parsed = {o for o in parsed if o in helped}
                undocumented = parsed - helped
                self.assertFalse(undocumented, "parsed but not in --help: %s" % undocumented)
                self.assertEqual(set(table), helped,
                                 "--help mentions options the audit does not list, or back")

    def test_every_named_test_exists(self):
        for command, table in AUDIT.items():
            for option, holders in table.items():
                for holder in holders if isinstance(holders, tuple) else (holders,):
                    with self.subTest(command=command, option=option, holder=holder):
                        self.check_holder(option, holder)

    def check_holder(self, option, holder):
        if holder.startswith("mention:"):
            self.assertIn(option, AUDIT[holder.split(":")[1]])
        elif ":" in holder:
            path, name = holder.split(":")
            klass, method = name.split(".")
            folder = "conform" if path.startswith("test_conform") else "apps"
            text = source("tests", folder, path)
            self.assertTrue("class %s(" % klass in text, "%s: no class %s" % (path, klass))
            self.assertTrue("def %s(" % method in text, "%s: no %s" % (path, method))
        else:
            klass, method = holder.split(".")
            self.assertTrue(hasattr(getattr(sys.modules[__name__], klass), method), holder)

    def test_every_train_option_is_audited(self):
        parsed = parsed_options("train")
        self.assertEqual(parsed, set(AUDIT["train"]))


# ---- global options and small commands ---------------------------------------


class GlobalOptionsTest(Base):
    def test_plugin_path_and_verbose(self):
        r = self.ok(["--plugin-path", self.path("nowhere"), "devices"])
        self.assertIn(self.path("nowhere") + " [missing-path]", r.stdout)
        self.assertNotIn("[missing-path]", self.ok(["devices"]).stdout)
        # refused where it could change nothing: these commands open no device
        self.refused(["--plugin-path", self.tmp, "tokenize", "--tokenizer", "x"],
                     "--plugin-path has no effect on 'tokenize'")
        self.refused(["--plugin-path", self.tmp, "data", "info", self.tmp],
                     "--plugin-path has no effect on 'data'")
        gpt2 = os.path.join(cli_util.CFG.models, "gpt2")
        tokens = write(self.path("t.json"), "[[1, 2, 3]]")
        out = self.path("o.st")
        quiet = self.ok(["forward", "--model", gpt2, "--tokens", tokens, "--out", out])
        loud = self.ok(["-v", "forward", "--model", gpt2, "--tokens", tokens, "--out", out])
        self.assertNotIn("loss", quiet.stderr)
        self.assertRegex(loud.stderr, r"loss \d+\.\d+")
        tok = os.path.join(cli_util.CFG.source, "tests", "fixtures", "tokenizers", "gpt2", "tokenizer.json")
        r = self.ok(["-v", "tokenize", "--tokenizer", tok], stdin="hello world")
        self.assertIn("bytes ->", r.stderr)
        r = self.ok(["-v", "tokenize", "--tokenizer", tok, "--decode"], stdin=r.stdout)
        self.assertIn("ids ->", r.stderr)
        self.refused(["-v", "devices"], "-v has no effect on 'devices'")
        self.refused(["--verbose", "data", "info", self.tmp], "-v has no effect on 'data'")

    def test_version(self):
        r = self.ok(["--version"])
        self.assertRegex(r.stdout, r"^trainyard \d+\.\d+")


class DevicesOptionsTest(Base):
    def test_json(self):
        text = self.ok(["devices"]).stdout
        data = json.loads(self.ok(["devices", "--json"]).stdout)
        self.assertIn("backends", data)
        self.assertRaises(ValueError, json.loads, text)


# ---- data ---------------------------------------------------------------------


class PrepareOptionsTest(Base):
    def meta(self, folder):
        with open(os.path.join(folder, "dataset.json")) as f:
            return json.load(f)

    def prepare(self, name, *args):
        out = self.path(name)
        self.ok(["data", "prepare", "--out", out] + list(args))
        return self.meta(out)

    def test_each_option(self):
        corpus = make_corpus(self.path("corpus.txt"))
        tok = self.path("tok.json")
        self.ok(["data", "train-tokenizer", "--input", corpus, "--vocab-size", "300",
                 "--special", "<|im_start|>", "--special", "<|im_end|>", "--special", "</s>",
                 "--out", tok])
        base = ["--tokenizer", tok, "--input", corpus, "--seq-len", "16"]
        m = self.prepare("base", *base)
        self.assertEqual(m["seq_len"], 16)                                   # --seq-len
        self.assertEqual(m["input_format"], "text")
        self.assertEqual(len(m["tokenizer"]["sha256"]), 64)                  # --tokenizer
        self.assertEqual(m["splits"]["val"]["rows"], 0)
        lines = self.prepare("lines", *base, "--format", "lines")            # --format, --input
        self.assertEqual(lines["input_format"], "lines")
        self.assertEqual(lines["splits"]["train"]["documents"], 300)
        val = self.prepare("val", *base, "--format", "lines", "--val-fraction", "0.3")
        self.assertGreater(val["splits"]["val"]["documents"], 40)            # --val-fraction
        seeded = self.prepare("seeded", *base, "--format", "lines", "--val-fraction", "0.3",
                              "--seed", "9")                                 # --seed
        self.assertNotEqual(seeded["splits"]["val"]["tokens"], val["splits"]["val"]["tokens"])
        self.refused(["data", "prepare", "--out", self.path("x")] + base + ["--seed", "9"],
                     "--seed only chooses the val split")
        eos = self.prepare("eos", *base, "--eos", "</s>")                    # --eos
        self.assertNotEqual(eos["tokenizer"]["eos_id"], m["tokenizer"]["eos_id"])
        shards = self.prepare("shards", *base, "--shard-rows", "10")         # --shard-rows
        self.assertGreater(len(shards["splits"]["train"]["shards"]), 1)
        self.assertEqual(len(m["splits"]["train"]["shards"]), 1)
        jsonl = write(self.path("d.jsonl"), "".join(json.dumps({"body": "the cat %d" % i}) + "\n"
                                                    for i in range(30)))
        j = self.prepare("jsonl", "--tokenizer", tok, "--input", jsonl, "--seq-len", "8",
                         "--format", "jsonl", "--text-field", "body")        # --text-field
        self.assertEqual(j["splits"]["train"]["documents"], 30)
        self.refused(["data", "prepare", "--out", self.path("x")] + base + ["--text-field", "b"],
                     "--text-field is for --format jsonl")
        chat = write(self.path("c.jsonl"), json.dumps({"messages": [
            {"role": "user", "content": "the cat"}, {"role": "assistant", "content": "sat"}]})
            + "\n")
        c = self.prepare("chat", "--tokenizer", tok, "--input", chat, "--seq-len", "8",
                         "--format", "chat", "--chat-template", "chatml")    # --chat-template
        self.assertEqual(c["chat_template"], "chatml")
        self.refused(["data", "prepare", "--out", self.path("x")] + base + ["--chat-template",
                                                                            "chatml"],
                     "--chat-template needs --format chat")
        ids = write(self.path("ids.jsonl"), '{"ids": [1, 2, 3], "weights": [0, 1, 1]}\n[4, 5]\n')
        i = self.prepare("ids", "--format", "ids", "--vocab-size", "50", "--eos-id", "49",
                         "--loss-weights", "--input", ids, "--seq-len", "4")
        self.assertEqual((i["tokenizer"]["vocab_size"], i["tokenizer"]["eos_id"]), (50, 49))
        self.assertTrue(i["loss_weights"])                                  # --loss-weights
        self.assertEqual(i["input_format"], "ids")  # it was "?" (issue 12)
        self.refused(["data", "prepare", "--format", "ids", "--vocab-size", "50", "--eos-id", "49",
                      "--eos", "</s>", "--input", ids, "--seq-len", "4", "--out", self.path("x")],
                     "--eos names a token of --tokenizer")
        self.refused(["data", "prepare", "--out", self.path("base")] + base, rc=1)
        self.prepare("base", *base, "--seq-len", "8", "--force")             # --force, --out
        self.assertEqual(self.meta(self.path("base"))["seq_len"], 8)


class TrainTokenizerOptionsTest(Base):
    def vocab(self, path):
        with open(path) as f:
            t = json.load(f)
        return t["model"]["vocab"], t["added_tokens"], t["model"]["merges"]

    def test_each_option(self):
        corpus = make_corpus(self.path("corpus.txt"))
        out = self.path("t.json")
        base = ["data", "train-tokenizer", "--input", corpus, "--out", out]
        self.ok(base + ["--vocab-size", "300"])                              # --input, --out
        vocab, added, merges = self.vocab(out)
        self.assertEqual(len(vocab), 300)                                    # --vocab-size
        self.refused(base + ["--vocab-size", "300"], "pass --force", rc=1)
        self.ok(base + ["--vocab-size", "280", "--force"])                   # --force
        self.assertEqual(len(self.vocab(out)[0]), 280)
        self.ok(base + ["--vocab-size", "300", "--force", "--special", "<|im_end|>"])
        self.assertIn("<|im_end|>", [a["content"] for a in self.vocab(out)[1]])  # --special
        self.ok(base + ["--vocab-size", "300", "--force", "--min-frequency", "200"])
        self.assertLess(len(self.vocab(out)[2]), len(merges))                # --min-frequency
        lines = self.ok(base + ["--vocab-size", "300", "--force", "--format", "lines"])
        self.assertIn("in 300 documents", lines.stdout)                      # --format
        self.assertIn("in 1 documents", self.ok(base + ["--vocab-size", "300", "--force"]).stdout)
        jsonl = write(self.path("d.jsonl"), "".join(json.dumps({"body": l}) + "\n" for l in
                                                    open(corpus).read().splitlines()))
        r = self.ok(["data", "train-tokenizer", "--input", jsonl, "--out", out, "--force",
                     "--vocab-size", "300", "--format", "jsonl", "--text-field", "body"])
        self.assertIn("in 300 documents", r.stdout)                          # --text-field
        self.refused(base + ["--vocab-size", "300", "--text-field", "body"],
                     "--text-field is for --format jsonl")
        self.refused(base + ["--vocab-size", "300", "--format", "ids"], "ids are not text")


# ---- train ----------------------------------------------------------------------


class TrainBase(Base):
    def setUp(self):
        super().setUp()
        self.data = make_ids_dataset(self.path("data"))

    def train(self, name, *args, preset=True):
        out = self.path(name)
        base = ["train", "--data", self.data, "--out", out, "--batch-size", "2",
                "--cache-dir", "none"]
        if preset and "--model" not in args:
            base += ["--preset", "gpt2-tiny"]
        if "--max-steps" not in args and "--epochs" not in args:
            base += ["--max-steps", "3"]
        r = self.ok(base + list(args))
        return out, r

    def weights(self, out, step=3):
        return read_bytes(os.path.join(out, "checkpoint-%d" % step, "model.safetensors"))


class TrainOptionsTest(TrainBase):
    def test_schedule_and_optimizer_options(self):
        base, _ = self.train("base", "--max-steps", "6")
        lr = [m["lr"] for m in metrics(base) if "lr" in m]
        self.assertAlmostEqual(lr[0], 3e-4, places=9)  # cosine from --lr's default
        out, _ = self.train("lr", "--max-steps", "6", "--lr", "1e-3", "--min-lr", "1e-4")
        lr2 = [m["lr"] for m in metrics(out) if "lr" in m]
        self.assertAlmostEqual(lr2[0], 1e-3, places=9)                       # --lr
        self.assertAlmostEqual(lr2[-1], 1e-4, places=9)                      # --min-lr
        out, _ = self.train("warm", "--max-steps", "6", "--warmup-steps", "3")
        self.assertAlmostEqual(metrics(out)[0]["lr"], 1e-4, places=9)        # --warmup-steps
        out, _ = self.train("lin", "--max-steps", "6", "--schedule", "linear")
        lin = [m["lr"] for m in metrics(out) if "lr" in m]
        self.assertAlmostEqual(lin[1], 3e-4 - (3e-4 - 3e-5) / 5, places=9)    # --schedule
        self.assertNotAlmostEqual(lin[1], lr[1], places=9)
        self.refused(["train", "--preset", "gpt2-tiny", "--data", self.data, "--schedule",
                      "constant", "--min-lr", "0"], "--min-lr has no effect with --schedule")
        # every optimizer knob changes the weights; each refused where it would not
        ref = self.weights(self.train("ref")[0])
        for name, args in (("wd", ["--weight-decay", "0.9", "--lr", "1e-2"]),
                           ("b1", ["--beta1", "0.5"]), ("b2", ["--beta2", "0.5"]),
                           ("eps", ["--eps", "1e-2"]), ("clip", ["--clip", "1e-3"]),
                           ("decay_all", ["--decay-all", "--weight-decay", "0.9", "--lr", "1e-2"])):
            with self.subTest(option=args[0]):
                other = self.weights(self.train(name, *args)[0])
                self.differ(other, ref, args[0])
        wd = self.weights(self.path("wd"))
        self.differ(self.weights(self.path("decay_all")), wd, "--decay-all")
        out, _ = self.train("sgd", "--optimizer", "sgd")                     # --optimizer
        sgd = safetensors_header(os.path.join(out, "checkpoint-3", "optimizer.safetensors"))
        self.assertTrue(any(k.endswith(".momentum_buffer") for k in sgd))
        mom = self.weights(self.train("mom", "--optimizer", "sgd", "--momentum", "0.1")[0])
        self.differ(mom, self.weights(out), "--momentum")
        self.refused(["train", "--preset", "gpt2-tiny", "--data", self.data, "--momentum", "0.5"],
                     "--momentum has no effect with --optimizer adamw")
        for option in ("--beta1", "--beta2", "--eps"):
            self.refused(["train", "--preset", "gpt2-tiny", "--data", self.data, "--optimizer",
                          "sgd", option, "0.5"], option + " has no effect with --optimizer sgd")
        self.refused(["train", "--preset", "gpt2-tiny", "--data", self.data, "--decay-all",
                      "--weight-decay", "0"], "--decay-all has no effect with --weight-decay 0")

    def test_run_shape_options(self):
        base, r = self.train("base")
        rows = metrics(base)
        self.assertEqual([m["step"] for m in rows if "loss" in m], [1, 2, 3])  # --max-steps
        self.assertIn("initialized from scratch", r.stderr)                  # --preset
        self.assertIn("device: cpu", r.stderr)
        tokens = rows[0]["tokens"]
        out, _ = self.train("b4", "--batch-size", "4")
        self.assertEqual(metrics(out)[0]["tokens"], 2 * tokens)              # --batch-size
        out, _ = self.train("acc", "--grad-accum", "2")
        self.assertEqual(metrics(out)[0]["tokens"], 2 * tokens)              # --grad-accum
        small = make_ids_dataset(self.path("small"), docs=12)
        epochs = ["train", "--preset", "gpt2-tiny", "--data", small, "--batch-size", "4",
                  "--cache-dir", "none", "--epochs"]
        r = self.ok(epochs + ["1", "--out", self.path("ep1")])
        self.assertRegex(r.stderr, r"; (\d+) steps of 4 rows \(\1 per epoch\)")  # --epochs
        per_epoch = int(re.search(r"\((\d+) per epoch\)", r.stderr).group(1))
        r = self.ok(epochs + ["2", "--out", self.path("ep2")])
        self.assertIn("; %d steps of 4 rows" % (2 * per_epoch), r.stderr)
        self.refused(["train", "--preset", "gpt2-tiny", "--data", self.data, "--epochs", "2",
                      "--max-steps", "3"], "--epochs has no effect with --max-steps 3")
        # a config file's epochs is what a command-line --max-steps overrides
        cfg = write(self.path("run.cfg"), "epochs = 50\nlr = 1e-3\n")
        out, r = self.train("cfg", "--config", cfg)                           # --config
        self.assertAlmostEqual(metrics(out)[0]["lr"], 1e-3, places=9)
        loss = rows[0]["loss"]
        out, _ = self.train("seed", "--seed", "7")
        self.assertNotEqual(metrics(out)[0]["loss"], loss)                   # --seed
        out, _ = self.train("drop", "--dropout", "0.3")
        self.assertNotEqual(metrics(out)[0]["loss"], loss)                   # --dropout
        out, _ = self.train("bf16", "--dtype", "bf16")                       # --dtype
        header = safetensors_header(os.path.join(out, "checkpoint-3", "model.safetensors"))
        self.assertEqual({v["dtype"] for k, v in header.items() if k != "__metadata__"}, {"BF16"})
        gpt2 = os.path.join(cli_util.CFG.models, "gpt2")
        out, r = self.train("model", "--model", gpt2)                        # --model
        self.assertIn(gpt2, r.stderr)
        self.assertEqual(read_bytes(os.path.join(out, "checkpoint-3", "config.json")),
                         read_bytes(os.path.join(gpt2, "config.json")))
        _, r = self.train("df", "--backend", "dataflow")                     # --backend
        self.assertIn("device: dataflow", r.stderr)
        self.refused(["train", "--preset", "gpt2-tiny", "--data", self.data, "--seq-len", "8"],
                     "--seq-len 8 differs from the dataset's 16", rc=1)      # --seq-len
        self.train("seq", "--seq-len", "16")
        other = make_ids_dataset(self.path("data2"), docs=300)               # --data
        _, r1 = self.train("d1")
        r2 = self.ok(["train", "--preset", "gpt2-tiny", "--data", other, "--out",
                      self.path("d2"), "--max-steps", "1", "--cache-dir", "none"])
        self.assertNotEqual(re.search(r"data: (\d+) train rows", r1.stderr).group(1),
                            re.search(r"data: (\d+) train rows", r2.stderr).group(1))
        self.assertTrue(os.path.isfile(os.path.join(base, "summary.txt")))   # --out

    def test_eval_save_log_options(self):
        out, r = self.train("base", "--max-steps", "6", "--eval-every", "2", "--save-every", "2",
                            "--keep", "2", "--log-every", "3")
        rows = metrics(out)
        self.assertEqual([m["step"] for m in rows if "val_loss" in m], [2, 4, 6])  # --eval-every
        self.assertEqual(sorted(n for n in os.listdir(out) if n.startswith("checkpoint-")),
                         ["checkpoint-4", "checkpoint-6"])            # --save-every, --keep
        self.assertEqual(len(re.findall(r"Step \[\d+/6\]", r.stderr)), 2)   # --log-every
        full = [m["val_loss"] for m in rows if "val_loss" in m]
        out, _ = self.train("eb", "--max-steps", "6", "--eval-every", "2", "--eval-batches", "1")
        one = [m["val_loss"] for m in metrics(out) if "val_loss" in m]
        self.assertNotEqual(one, full)                                       # --eval-batches
        noval = make_ids_dataset(self.path("noval"), val_fraction=None)
        for option in ("--eval-every", "--eval-batches"):
            self.refused(["train", "--preset", "gpt2-tiny", "--data", noval, "--out",
                          self.path("nv"), "--max-steps", "1", option, "1"],
                         option + " has no effect: the data in", rc=1)
        cache = self.path("cache")
        _, r = self.train("cached", "--backend", "dataflow", "--cache-dir", cache)
        self.assertIn("train step: miss", r.stderr)                          # --cache-dir
        self.assertTrue(os.listdir(cache))
        _, r = self.train("cached2", "--backend", "dataflow", "--cache-dir", cache)
        self.assertIn("train step: hit", r.stderr)
        failing = ["train", "--preset", "gpt2-tiny", "--data", self.data, "--out",
                   self.path("f"), "--max-steps", "1", "--backend", "dataflow", "--grad-accum",
                   "2", "--cache-dir", cache]
        self.assertNotIn("a cached compile failure", run(failing).stderr)
        self.assertIn("a cached compile failure", run(failing).stderr)
        r = run(failing + ["--retry-failed"])                                # --retry-failed
        self.assertEqual(r.returncode, 1)
        self.assertNotIn("a cached compile failure", r.stderr)
        self.refused(["train", "--preset", "gpt2-tiny", "--data", self.data, "--artifact", "a",
                      "--cache-dir", cache], "--cache-dir has no effect with --artifact")
        self.refused(["train", "--preset", "gpt2-tiny", "--data", self.data, "--retry-failed",
                      "--cache-dir", "none"], "--retry-failed has no effect without a compile")


class TrainSampleTest(TrainBase):
    def test_samples_at_evaluations_and_checkpoints(self):
        corpus = make_corpus(self.path("corpus.txt"))
        tok = self.path("tok.json")
        self.ok(["data", "train-tokenizer", "--input", corpus, "--format", "lines",
                 "--vocab-size", "300", "--out", tok])
        data = self.path("text")
        self.ok(["data", "prepare", "--tokenizer", tok, "--input", corpus, "--format", "lines",
                 "--seq-len", "16", "--val-fraction", "0.1", "--out", data])
        out = self.path("run")
        r = self.ok(["train", "--preset", "gpt2-tiny", "--data", data, "--tokenizer", tok,
                     "--out", out, "--max-steps", "10", "--eval-every", "5", "--save-every", "10",
                     "--batch-size", "4", "--lr", "3e-3", "--sample-tokens", "6",
                     "--sample-prompt", "the cat", "--cache-dir", "none"])
        samples = [m for m in metrics(out) if "sample_ids" in m]
        self.assertEqual([m["step"] for m in samples], [5, 10])  # evaluations and checkpoints
        for m in samples:
            self.assertEqual(len(m["sample_ids"]), 6)
            self.assertEqual(m["sample_prompt"], "the cat")
            self.assertIn("step %d: sample \"the cat\" -> " % m["step"], r.stderr)
        # the same engine as `trainyard generate`, on the same weights
        g = self.ok(["generate", "--model", os.path.join(out, "checkpoint-10"), "--prompt",
                     "the cat", "--max-new-tokens", "6", "--greedy", "--json"])
        self.assertEqual(json.loads(g.stdout)["ids"], samples[-1]["sample_ids"])
        self.assertEqual(json.loads(g.stdout)["text"], samples[-1]["sample"])
        # without a tokenizer: ids, from the end-of-text token
        out, r = self.train("ids", "--sample-tokens", "4", "--max-steps", "2")
        ids = [m for m in metrics(out) if "sample_ids" in m]
        self.assertEqual([m["step"] for m in ids], [2])
        self.assertEqual(ids[0]["sample_prompt_ids"], [95])
        self.assertNotIn("sample", ids[0])
        self.assertIn("step 2: sample ids", r.stderr)
        self.refused(["train", "--preset", "gpt2-tiny", "--data", self.data, "--out",
                      self.path("x"), "--sample-tokens", "4", "--sample-prompt", "hi"],
                     "--sample-prompt needs a tokenizer", rc=1)
        self.refused(["train", "--preset", "gpt2-tiny", "--data", self.data, "--sample-prompt",
                      "hi"], "--sample-prompt needs --sample-tokens")
        self.refused(["train", "--model", os.path.join(cli_util.CFG.models, "gpt2"), "--data", self.data,
                      "--out", self.path("y"), "--sample-tokens", "64"],
                     "--sample-tokens 64", "exceeds the model's 64 positions", rc=1)


# ---- compile, generate, forward, tokenize ----------------------------------------


class CompileOptionsTest(Base):
    def compile(self, name, *args):
        out = self.path(name + ".tyart")
        r = self.ok(["compile", "--out", out, "--cache-dir", "none"] + list(args))
        return read_bytes(out), r

    def test_each_option(self):
        gpt2 = os.path.join(cli_util.CFG.models, "gpt2")
        base = ["--backend", "dataflow", "--model", gpt2, "--seq-len", "8", "--batch-size", "2"]
        ref, r = self.compile("ref", *base)                                  # --backend, --out
        self.assertIn("train step on dataflow", r.stdout)
        self.assertTrue(os.path.isfile(self.path("ref.tyart.report.txt")))
        self.assertIn("batch 2 x 8 tokens", r.stdout)                        # --batch-size, --seq-len
        for name, args in (("b4", ["--batch-size", "4"]), ("inf", ["--inference"]),
                           ("sgd", ["--optimizer", "sgd"]), ("bf16", ["--dtype", "bf16"]),
                           ("drop", ["--dropout", "0.1"]), ("decay", ["--decay-all"]),
                           ("tiles", ["--backend", "dataflow?tiles=2"])):
            with self.subTest(option=args[0]):
                other, _ = self.compile(name, *(base + args))
                self.differ(other, ref, args[0])
        r = run(["compile", "--out", self.path("acc.tyart"), "--cache-dir", "none"] + base +
                ["--grad-accum", "2"])                                       # --grad-accum
        self.assertEqual(r.returncode, 1)
        self.assertIn("accumulation", r.stderr)
        _, r = self.compile("preset", "--backend", "dataflow", "--preset", "gpt2-tiny",
                            "--vocab-size", "64", "--seq-len", "8")
        self.assertIn("gpt2-tiny", r.stdout)                                 # --preset
        self.differ(self.compile("preset2", "--backend", "dataflow", "--preset", "gpt2-tiny",
                                 "--vocab-size", "80", "--seq-len", "8")[0],
                    read_bytes(self.path("preset.tyart")), "--vocab-size")
        # --eos-id was parsed and changed no graph: it is gone (issue 12)
        self.refused(["compile", "--backend", "dataflow", "--preset", "gpt2-tiny", "--vocab-size",
                      "64", "--eos-id", "3", "--seq-len", "8", "--out", self.path("x")],
                     "unknown option '--eos-id'")
        data = make_ids_dataset(self.path("data"))
        _, r = self.compile("data", "--backend", "dataflow", "--preset", "gpt2-tiny", "--data",
                            data, "--batch-size", "2")                       # --data
        self.assertIn("batch 2 x 16 tokens", r.stdout)
        self.refused(["compile", "--backend", "dataflow", "--preset", "gpt2-tiny", "--data", data,
                      "--seq-len", "8", "--out", self.path("x")],
                     "--seq-len 8 differs from the data's 16", rc=1)
        self.refused(["compile", "--out", self.path("x")] + base + ["--vocab-size", "50"],
                     "--vocab-size is for --preset")
        for option in (["--optimizer", "sgd"], ["--dropout", "0.1"], ["--decay-all"],
                       ["--grad-accum", "2"]):
            self.refused(["compile", "--out", self.path("x"), "--inference"] + base + option,
                         option[0] + " has no effect with --inference")
        for option in ("--lr", "--min-lr", "--warmup-steps", "--schedule", "--weight-decay",
                       "--beta1", "--beta2", "--eps", "--momentum", "--clip"):
            self.refused(["compile", "--out", self.path("x")] + base + [option, "1"],
                         option + " is a runtime hyperparameter")
        cache = self.path("cache")
        r = self.ok(["compile", "--out", self.path("c.tyart"), "--cache-dir", cache] + base)
        self.assertIn("compile cache: miss", r.stdout)                       # --cache-dir
        r = self.ok(["compile", "--out", self.path("c.tyart"), "--cache-dir", cache] + base)
        self.assertIn("compile cache: hit", r.stdout)
        failing = ["compile", "--out", self.path("f.tyart"), "--cache-dir", cache, "--grad-accum",
                   "2"] + base
        self.assertNotIn("a cached compile failure", run(failing).stderr)
        self.assertIn("a cached compile failure", run(failing).stderr)
        r = run(failing + ["--retry-failed"])                                # --retry-failed
        self.assertEqual(r.returncode, 1)
        self.assertNotIn("a cached compile failure", r.stderr)
        self.refused(["compile", "--out", self.path("x"), "--cache-dir", "none", "--retry-failed"]
                     + base, "--retry-failed has no effect without a compile cache")


class GenerateOptionsTest(Base):
    def gen(self, *args):
        r = self.ok(["generate", "--json"] + list(args))
        return json.loads(r.stdout), r.stderr

    def test_each_option(self):
        gpt2 = os.path.join(cli_util.CFG.models, "gpt2")
        llama = os.path.join(cli_util.CFG.models, "llama")
        base = ["--model", gpt2, "--prompt-ids", "1,2,3", "--max-new-tokens", "8"]
        greedy, err = self.gen(*base)
        self.assertEqual(len(greedy["ids"]), 8)                              # --max-new-tokens
        self.assertIn("3 prompt + 8 new tokens on cpu:0 (f32, greedy)", err)
        self.assertEqual(self.gen(*base, "--greedy")[0], greedy)             # --greedy: the default
        self.refused(["generate", "--greedy", "--temperature", "2"] + base, "--greedy cannot")
        other, _ = self.gen("--model", gpt2, "--prompt-ids", "4,5,6", "--max-new-tokens", "8")
        self.assertNotEqual(other["ids"], greedy["ids"])                     # --prompt-ids
        llama_out, _ = self.gen("--model", llama, "--prompt-ids", "1,2,3", "--max-new-tokens", "8")
        self.assertNotEqual(llama_out["ids"], greedy["ids"])                 # --model
        sampled = [self.gen(*base, "--temperature", "3", "--seed", str(s))[0]["ids"]
                   for s in (1, 2)]
        self.assertNotEqual(sampled[0], sampled[1])                          # --seed
        self.assertNotEqual(sampled[0], greedy["ids"])                       # --temperature
        self.assertEqual(self.gen(*base, "--top-k", "1", "--seed", "1")[0], greedy)   # --top-k
        self.assertEqual(self.gen(*base, "--top-p", "1e-9", "--seed", "1")[0], greedy)  # --top-p
        self.assertNotEqual(self.gen(*base, "--top-k", "50", "--temperature", "3", "--seed", "1")
                            [0]["ids"], greedy["ids"])
        self.refused(["generate"] + base + ["--seed", "3"], "--seed only matters when sampling")
        _, err = self.gen(*base, "--dtype", "bf16")                          # --dtype
        self.assertIn("(bf16, greedy)", err)
        _, err = self.gen(*base, "--backend", "dataflow")                    # --backend
        self.assertIn("on dataflow:0", err)
        plain = self.ok(["generate"] + base).stdout
        self.assertEqual(plain.split(), [str(i) for i in greedy["ids"]])     # --json
        # --stop-at-eos: the model's eos_token_id (95) ends the continuation; a hot
        # sampler (the same draws with and without the flag) reaches it soon
        hot = ["--model", gpt2, "--prompt-ids", "1", "--max-new-tokens", "40", "--temperature",
               "100"]
        found = None
        for seed in range(60):
            ids = self.gen(*hot, "--seed", str(seed))[0]["ids"]
            if 95 in ids[:-1]:
                found, cut = str(seed), ids.index(95) + 1
                break
        self.assertIsNotNone(found, "no seed whose continuation holds the EOS")
        stopped, _ = self.gen(*hot, "--seed", found, "--stop-at-eos")
        self.assertEqual(len(stopped["ids"]), cut)                           # --stop-at-eos
        self.assertEqual(stopped["ids"][-1], 95)
        # --prompt: text through the model folder's tokenizer (a checkpoint has one)
        model = cli_util.train_tiny_model(self.tmp)
        tok = self.path("tok.json")
        text, _ = self.gen("--model", model, "--prompt", "the cat", "--max-new-tokens", "4")
        self.assertEqual(len(text["ids"]), 4)                                # --prompt
        self.assertIsInstance(text["text"], str)
        by_ids, _ = self.gen("--model", model, "--prompt-ids", ",".join(
            self.ok(["tokenize", "--tokenizer", tok], stdin="the cat").stdout.split()),
            "--max-new-tokens", "4")
        self.assertEqual(by_ids["ids"], text["ids"])
        self.refused(["generate", "--model", gpt2, "--prompt", "the cat", "--max-new-tokens",
                      "2"], "--prompt needs", rc=1)

    def test_input_options(self):
        gpt2 = os.path.join(cli_util.CFG.models, "gpt2")
        lines = [{"prompt_ids": [1, 2, 3], "max_new_tokens": 8, "id": "first"},
                 {"prompt_ids": [4, 5, 6, 7, 8, 9, 10], "max_new_tokens": 5},
                 {"prompt_ids": [11]},
                 {"prompt_ids": [12, 13], "max_new_tokens": 6, "temperature": 1.5, "seed": 4},
                 {"prompt_ids": [14, 15, 16, 17], "max_new_tokens": 12}]
        prompts = write(self.path("p.jsonl"), "".join(json.dumps(l) + "\n" for l in lines))
        out = self.path("o.jsonl")
        base = ["generate", "--model", gpt2, "--input", prompts, "--output", out,
                "--max-new-tokens", "4"]

        def results(*extra):
            r = self.ok(base + list(extra))
            with open(out) as f:
                return [json.loads(l) for l in f], r.stderr

        got, err = results("--max-batch", "3")                              # --input, --output
        self.assertEqual([g["index"] for g in got], [0, 1, 2, 3, 4])
        self.assertEqual(got[0]["id"], "first")
        self.assertEqual([len(g["ids"]) for g in got], [8, 5, 4, 6, 12])  # --max-new-tokens
        self.assertIn("5 prompts", err)
        self.assertIn("3 slots of 16 tokens", err)                     # --max-batch; ctx: 4 + 12
        # Greedy lines give what one prompt alone gives.
        for line, result in zip(lines, got):
            if "temperature" in line:
                continue
            alone = self.ok(["generate", "--model", gpt2, "--json", "--prompt-ids",
                             ",".join(map(str, line["prompt_ids"])), "--max-new-tokens",
                             str(line.get("max_new_tokens", 4))])
            self.assertEqual(json.loads(alone.stdout)["ids"], result["ids"])
        chunked, err = results("--max-batch", "2", "--prefill-chunk", "2")  # --prefill-chunk
        self.assertIn("prefill chunk 2", err)
        self.assertEqual(chunked, got)
        # --prefill-budget: a step prefills up to 4 prompt tokens (chunks of 1
        # of several prompts) while others decode: the same tokens, in fewer
        # steps.
        steps = lambda e: int(re.search(r"(\d+) engine steps", e).group(1))  # noqa: E731
        one, err_one = results("--max-batch", "5", "--prefill-chunk", "1")
        budget, err_budget = results("--max-batch", "5", "--prefill-chunk", "1",
                                     "--prefill-budget", "4")
        self.assertEqual(one, got)
        self.assertEqual(budget, got)
        self.assertLess(steps(err_budget), steps(err_one))
        self.refused(base + ["--prefill-budget", "0"], "--prefill-budget must be an integer")
        _, err = results("--ctx", "40")                                      # --ctx
        self.assertIn("of 40 tokens", err)
        self.refused(base + ["--ctx", "12"], "p.jsonl:5: a prompt of 4 tokens + 12 new tokens "
                     "exceeds --ctx 12", rc=1)
        self.refused(base[:-2], "p.jsonl:3: no \"max_new_tokens\" and no --max-new-tokens",
                     rc=1)
        self.refused(base + ["--prompt-ids", "1"], "--input takes its prompts from the file")
        self.refused(["generate", "--model", gpt2, "--input", prompts], "--input and --output")
        self.refused(["generate", "--model", gpt2, "--prompt-ids", "1", "--max-new-tokens", "2",
                      "--max-batch", "2"], "apply to --input only")
        bad = write(self.path("bad.jsonl"), '{"prompt_ids": [1]}\n{"prompt_ids": [1], '
                    '"colour": 1}\n')
        self.refused(["generate", "--model", gpt2, "--input", bad, "--output", out,
                      "--max-new-tokens", "2"], 'bad.jsonl:2: unknown key "colour"', rc=1)
        # Text prompts and stop strings need the model's tokenizer.
        model = cli_util.train_tiny_model(self.tmp)
        whole = self.ok(["generate", "--model", model, "--prompt", "the cat", "--json",
                         "--max-new-tokens", "30"])
        text = json.loads(whole.stdout)["text"]
        stop = text[5:8]
        texts = write(self.path("t.jsonl"), json.dumps(
            {"prompt": "the cat", "max_new_tokens": 30, "stop": [stop]}) + "\n")
        self.ok(["generate", "--model", model, "--input", texts, "--output", out])
        with open(out) as f:
            result = json.loads(f.readline())
        self.assertEqual(result["text"], text[:text.index(stop)])
        self.assertEqual(result["finish_reason"], "stop")


class ForwardOptionsTest(Base):
    def test_each_option(self):
        gpt2 = os.path.join(cli_util.CFG.models, "gpt2")
        llama = os.path.join(cli_util.CFG.models, "llama")
        tokens = write(self.path("t.json"), "[[1, 2, 3, 4], [5, 6, 7, 8]]")
        out = self.path("o.st")

        def forward(*args):
            self.ok(["forward", "--tokens", tokens, "--out", out] + list(args))
            return read_bytes(out), safetensors_header(out)

        ref, header = forward("--model", gpt2)                               # --model, --out
        self.assertEqual(header["logits"]["shape"], [2, 4, 96])              # --tokens
        self.assertNotIn("grad.transformer.wte.weight", header)
        self.differ(forward("--model", llama)[0], ref, "--model")
        _, header = forward("--model", gpt2, "--grads")                      # --grads
        self.assertIn("grad.transformer.wte.weight", header)
        self.differ(forward("--model", gpt2, "--dtype", "bf16")[0], ref, "--dtype")
        self.differ(forward("--model", gpt2, "--backend", "cpu?kernels=reference")[0], ref,
                    "--backend")
        dump = self.path("graph")
        forward("--model", gpt2, "--dump-graph", dump)                       # --dump-graph
        self.assertTrue(os.path.getsize(dump + ".txt") > 0)
        self.assertIn("digraph", open(dump + ".dot").read())


class TokenizeOptionsTest(Base):
    def test_each_option(self):
        fixtures = os.path.join(cli_util.CFG.source, "tests", "fixtures", "tokenizers")
        gpt2 = os.path.join(fixtures, "gpt2", "tokenizer.json")
        llama = os.path.join(fixtures, "llama2_legacy", "tokenizer.json")
        text = "Hello world"
        ids = self.ok(["tokenize", "--tokenizer", gpt2], stdin=text).stdout.split()
        other = self.ok(["tokenize", "--tokenizer", llama], stdin=text).stdout.split()
        self.assertNotEqual(ids, other)                                      # --tokenizer
        as_json = json.loads(self.ok(["tokenize", "--tokenizer", gpt2, "--json"],
                                     stdin=text).stdout)
        self.assertEqual([str(i) for i in as_json["ids"]], ids)              # --json
        back = self.ok(["tokenize", "--tokenizer", gpt2, "--decode"], stdin=" ".join(ids)).stdout
        self.assertEqual(back, text)                                         # --decode
        with_bos = self.ok(["tokenize", "--tokenizer", llama], stdin=text).stdout.split()
        no_bos = self.ok(["tokenize", "--tokenizer", llama, "--no-special"],
                         stdin=text).stdout.split()
        self.assertEqual(with_bos[1:], no_bos)                               # --no-special
        self.assertNotEqual(with_bos, no_bos)
        shown = self.ok(["tokenize", "--tokenizer", llama, "--decode"], stdin=" ".join(with_bos))
        hidden = self.ok(["tokenize", "--tokenizer", llama, "--decode", "--no-special"],
                         stdin=" ".join(with_bos))
        self.assertIn("<s>", shown.stdout)
        self.assertNotIn("<s>", hidden.stdout)


# ---- compare and conform -----------------------------------------------------------


class CompareOptionsTest(Base):
    def test_each_option(self):
        data = make_ids_dataset(self.path("data"))
        out = self.path("cmp")
        base = ["compare", "--preset", "gpt2-tiny", "--data", data, "--batch-size", "2",
                "--cache-dir", "none"]
        r = self.ok(base + ["--backends", "cpu,dataflow", "--steps", "2", "--out", out])
        self.assertIn("2 steps of gpt2-tiny on 2 backends", r.stdout)  # --backends, --steps
        self.assertTrue(os.path.isfile(os.path.join(out, "compare.csv")))    # --out
        self.assertTrue(os.path.isdir(os.path.join(out, "2-dataflow")))
        with open(os.path.join(out, "compare.csv")) as f:
            self.assertEqual(len(f.read().splitlines()), 3)
        # --tolerance: a loose one passes and the run reports its largest
        # difference d; below d the run fails. The reference kernels round
        # differently from the fast ones with gcc's build; clang's (-O1, the
        # ASan build) gives bit-equal losses here, where 0 must pass.
        uris = "cpu,cpu?kernels=reference"
        r = self.ok(base + ["--backends", uris, "--steps", "2", "--out", self.path("t1"),
                            "--tolerance", "1"])
        d = float(re.search(r"max relative loss difference: (\S+)",
                            r.stdout + r.stderr).group(1))
        r = run(base + ["--backends", uris, "--steps", "2", "--out", self.path("t0"),
                        "--tolerance", "%.3e" % (d / 2)])                    # --tolerance
        if d > 0:
            self.assertEqual(r.returncode, 1, r.stderr[-2000:])
            self.assertIn("exceeds the tolerance", r.stderr)
        else:
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        cfg = write(self.path("c.cfg"), "lr = 1e-2\n")
        self.ok(base + ["--backends", "cpu,dataflow", "--steps", "2", "--out", self.path("cf"),
                        "--config", cfg, "--dropout", "0.1"])  # --config, train options
        m = metrics(os.path.join(self.path("cf"), "1-cpu"))
        self.assertAlmostEqual(m[0]["lr"], 1e-2, places=9)
        with open(os.path.join(self.path("cf"), "1-cpu", "train_config.json")) as f:
            saved = json.load(f)
        self.assertEqual((saved["dropout"], saved["batch_size"]), (0.1, 2))
        self.ok(base[:1] + ["--model", os.path.join(cli_util.CFG.models, "gpt2")] + base[3:] +
                ["--backends", "cpu,dataflow", "--steps", "1", "--out", self.path("m")])
        for option in ("--backend", "--max-steps", "--epochs", "--resume"):
            self.refused(base + ["--backends", "cpu,dataflow", "--steps", "2", "--out",
                                 self.path("x"), option, "1"], "is set by compare")
        self.refused(base + ["--backends", "cpu", "--steps", "2", "--out", self.path("x")],
                     "two or more URIs")

    def test_parser_shared_with_train(self):
        # compare parses with train's parser (train/train_args.h): a trailing
        # --config is refused by both, not ignored by compare
        args = ["--preset", "gpt2-tiny", "--data", self.path("none"), "--config"]
        for command in (["train"], ["compare", "--backends", "cpu,dataflow", "--steps", "1",
                                    "--out", self.path("x")]):
            with self.subTest(command=command[0]):
                self.refused(command + args, "--config needs a file")


class ConformOptionsTest(Base):
    def conform(self, *args):
        r = run(["conform"] + list(args))
        self.assertIn(r.returncode, (0, 1), r.stderr[-2000:])
        return r

    def results(self, *args):
        return json.loads(self.conform("--json", *args).stdout)

    def test_each_option(self):
        rows = self.results("--backend", "cpu", "--ops", "add", "--seed", "1")
        self.assertEqual({r["op"] for r in rows}, {"add"})                   # --ops, --json
        self.assertEqual({r["dtype"] for r in self.results("--backend", "cpu", "--ops", "add",
                                                           "--dtype", "bf16", "--seed", "1")},
                         {"bf16"})                                           # --dtype
        self.assertEqual({r["direction"] for r in self.results(
            "--backend", "cpu", "--ops", "add", "--direction", "forward", "--seed", "1")},
            {"forward"})                                                     # --direction
        again = self.results("--backend", "cpu", "--ops", "add", "--seed", "1")
        other = self.results("--backend", "cpu", "--ops", "add", "--seed", "2")
        self.assertEqual([r["nmse"] for r in again], [r["nmse"] for r in rows])
        self.assertNotEqual([r["nmse"] for r in other], [r["nmse"] for r in rows])  # --seed
        ref = self.conform("--backend", "cpu?kernels=reference", "--ops", "add", "--seed", "1")
        self.assertIn("runs the reference kernels", ref.stderr + ref.stdout)  # --backend
        graph = self.results("--backend", "cpu", "--ops", "add", "--seed", "1", "--tier", "graph")
        self.assertEqual({r["tier"] for r in graph}, {"whole-graph"})        # --tier
        self.assertEqual({r["tier"] for r in rows}, {"per-op"})
        xfail = write(self.path("x.txt"), "add f32 forward listed here to test --xfail\n")
        marked = self.results("--backend", "cpu", "--ops", "add", "--seed", "1", "--xfail", xfail)
        self.assertIn("xpass", {r["status"] for r in marked})                # --xfail
        listed = run(["conform", "--list", "--ops", "add"])                  # --list
        self.assertEqual(listed.returncode, 0)
        self.assertIn("same-shape", listed.stdout)
        fwd_only = run(["conform", "--list", "--direction", "backward"]).stdout
        self.assertLess(len(fwd_only), len(run(["conform", "--list"]).stdout))
        for option in (["--backend", "cpu"], ["--seed", "1"], ["--xfail", xfail],
                       ["--tier", "op"], ["--json"], ["--summary"], ["--only-failures"],
                       ["--bisect"], ["--against", "cpu"], ["--model", "gpt2"],
                       ["--steps", "2"], ["--tolerance", "0.5"]):
            self.refused(["conform", "--list"] + option,
                         option[0] + " has no effect with --list")

    def test_model_tier_options(self):
        base = ["--backend", "cpu", "--tier", "model", "--model", "gpt2", "--seed", "1"]
        rows = self.results(*base)
        self.assertEqual({r["model"] for r in rows}, {"gpt2"})              # --model
        self.assertEqual({r["bound"] for r in rows}, {1e-9})
        loose = self.results(*(base + ["--tolerance", "0.5"]))               # --tolerance
        self.assertEqual({r["bound"] for r in loose}, {0.5})
        self.refused(["conform", "--backend", "cpu", "--ops", "add", "--tolerance", "0.5"],
                     "--tolerance go with --tier model")


class EmptyValueTest(Base):
    """Issue 33: an empty value is refused for every option that takes one
    (on the command line, as key=value and in a --config file), naming the
    option: --memory-limit '' meant "no limit" while --recompute '' was
    refused. Nothing is started or written."""

    def test_train_and_compile(self):
        data = make_ids_dataset(self.path("ids"))
        out = self.path("o")
        base = ["train", "--preset", "gpt2-tiny", "--data", data, "--out", out, "--max-steps",
                "1", "--cache-dir", "none"]
        for option in ("--memory-limit", "--recompute", "--offload", "--out", "--tokenizer",
                       "--control-registry", "--eval-data", "--resume", "--sample-prompt",
                       "--backend", "--dtype", "--optimizer", "--artifact", "--dump-graph",
                       "--cache-dir", "--distributed", "--pp-schedule"):
            with self.subTest(option=option):
                self.refused(base + [option, ""], "%s is empty: give it a value" % option)
        self.refused(base + ["--memory-limit="], "--memory-limit is empty")
        self.refused(base + ["memory_limit="], "--memory-limit is empty")
        self.refused(base + ["--cache-dir="], "--cache-dir is empty", "'none' for no cache")
        config = write(self.path("run.cfg"), "lr = 0.001\nmemory_limit =\n")
        self.refused(base + ["--config", config], "run.cfg:2: --memory-limit is empty")
        self.assertFalse(os.path.exists(out))
        plan = ["compile", "--backend", "cpu", "--preset", "gpt2-tiny", "--vocab-size", "96",
                "--seq-len", "16", "--plan-only"]
        self.ok(plan)
        for option in ("--memory-limit", "--recompute", "--model", "--backend", "--dtype",
                       "--cache-dir"):
            with self.subTest(option=option):
                self.refused(plan + [option, ""], "%s is empty" % option)
        self.refused(["check", "--preset", "gpt2-tiny", "--vocab-size", "96", "--data", ""],
                     "--data is empty")

    def test_getopt_commands(self):
        gpt2 = os.path.join(cli_util.CFG.models, "gpt2")
        data = write(self.path("e.jsonl"), '{"prompt_ids": [1], "completion_ids": [2]}\n')
        cases = [
            (["eval", "--model", gpt2, "--data", ""], "--data is empty"),
            (["eval", "--model", gpt2, "--data="], "--data is empty"),
            (["eval", "--model", gpt2, "--data", data, "--ou="], "--out is empty"),  # a prefix
            (["eval", "--model", gpt2, "--data", data, "--backend", ""], "--backend is empty"),
            (["generate", "--model", "", "--prompt-ids", "1"], "--model is empty"),
            (["generate", "--model", gpt2, "--prompt", ""], "--prompt is empty"),
            (["generate", "--model", gpt2, "--prompt-ids", "1", "--output", ""],
             "--output is empty"),
            (["forward", "--model", gpt2, "--tokens", ""], "--tokens is empty"),
            (["tokenize", "--tokenizer", ""], "--tokenizer is empty"),
            (["data", "prepare", "--input", data, "--out", ""], "--out is empty"),
            (["data", "train-tokenizer", "--input", data, "--special", ""],
             "--special is empty"),
            (["conform", "--backend", ""], "--backend is empty"),
            (["control", "list", "--registry", ""], "--registry is empty"),
            (["serve", "--model", gpt2, "--api-key", ""], "--api-key is empty"),
            (["ckpt", "split", "--ranks", "", self.tmp], "--ranks is empty"),
        ]
        for args, needle in cases:
            with self.subTest(args=args):
                self.refused(args, needle, "give it a value, or leave it out")


class CacheDirWarningTest(Base):
    """Issue 33: a compile cache others can write (its entries are loaded
    as executables) is used with one warning, printed once per run; a
    folder of the user's own gives none."""

    def test_warns_once(self):
        data = make_ids_dataset(self.path("ids"))
        cache = self.path("cache")
        os.mkdir(cache)
        os.chmod(cache, 0o777)
        base = ["train", "--preset", "gpt2-tiny", "--data", data, "--max-steps", "2",
                "--batch-size", "2", "--eval-every", "1", "--cache-dir", cache]
        r = self.ok(base + ["--out", self.path("a")])
        line = ("trainyard train: warning: the compile cache %s is not yours alone: folder %s "
                "is writable by its group or others (mode 0777)" % (cache, os.path.realpath(cache)))
        self.assertIn(line, r.stderr)
        self.assertEqual(r.stderr.count("is not yours alone"), 1, r.stderr)
        os.chmod(cache, 0o755)
        r = self.ok(base + ["--out", self.path("b")])
        self.assertNotIn("is not yours alone", r.stderr)
        layout = os.path.join(cache, "compile-v1")  # the layout folder inside
        os.makedirs(layout, exist_ok=True)
        os.chmod(layout, 0o777)
        r = self.ok(base + ["--out", self.path("c")])
        self.assertIn("is not yours alone", r.stderr)


class CheckOptionsTest(Base):
    """`trainyard check`: each option changes the graphs it checks (their
    shapes, ops and dtypes in the JSON), or is refused where it would not."""

    def check(self, *args):
        r = self.ok(["check", "--json"] + list(args))
        return json.loads(r.stdout)

    @staticmethod
    def op(data, name):
        return next(o for o in data["ops"] if o["op"] == name)

    def test_each_option(self):
        preset = ["--backend", "cpu", "--preset", "gpt2-tiny", "--vocab-size", "96",
                  "--batch-size", "2", "--seq-len", "16"]
        data = self.check(*preset)                                           # --backend, --json
        self.assertEqual(data["backend"], "cpu")
        # --preset, --vocab-size, --batch-size, --seq-len
        self.assertEqual(self.op(data, "embedding")["example"], "[96,128] [2,16] -> [2,16,128]")
        self.assertEqual([g["name"] for g in data["graphs"]],
                         ["forward", "forward-grads", "generate-prefill", "generate-decode"])
        gpt2 = os.path.join(cli_util.CFG.models, "gpt2")
        model = self.check("--backend", "cpu", "--model", gpt2, "--batch-size", "2",
                           "--seq-len", "16")                                # --model
        self.assertNotEqual(self.op(model, "embedding")["example"],
                            self.op(data, "embedding")["example"])
        self.assertEqual({o["dtype"] for o in self.check(*(preset + ["--dtype", "bf16"]))["ops"]
                          if o["op"] == "matmul"}, {"bf16"})                 # --dtype
        train = self.check(*(preset + ["--train"]))                          # --train
        self.assertEqual([g["name"] for g in train["graphs"]],         # added, not replaced
                         ["train-step", "validation", "forward", "forward-grads",
                          "generate-prefill", "generate-decode"])
        self.assertIn("adamw_update", {o["op"] for o in train["ops"]})
        sgd = {o["op"] for o in self.check(*(preset + ["--train", "--optimizer", "sgd"]))["ops"]}
        self.assertIn("sgd_update", sgd)                                     # --optimizer
        self.assertNotIn("adamw_update", sgd)
        drop = {o["op"] for o in self.check(*(preset + ["--train", "--dropout", "0.1"]))["ops"]}
        self.assertIn("dropout", drop - {o["op"] for o in train["ops"]})     # --dropout
        accum = self.check(*(preset + ["--train", "--grad-accum", "2"]))     # --grad-accum
        self.assertIn("optimizer-step", [g["name"] for g in accum["graphs"]])
        dump = self.path("g")
        self.ok(["check"] + preset + ["--train", "--dump-graph", dump])
        self.ok(["check"] + preset + ["--train", "--decay-all", "--dump-graph", dump + "d"])
        self.differ(read_bytes(dump + "-train-step.txt"),                    # --decay-all
                    read_bytes(dump + "d-train-step.txt"), "--decay-all")
        ids = make_ids_dataset(self.path("data"))
        from_data = self.check("--backend", "cpu", "--preset", "gpt2-tiny", "--data", ids,
                               "--batch-size", "2")                          # --data
        self.assertEqual(self.op(from_data, "embedding")["example"],
                         "[96,128] [2,16] -> [2,16,128]")
        self.refused(["check", "--backend", "cpu", "--preset", "gpt2-tiny", "--data", ids,
                      "--seq-len", "8"], "--seq-len 8 differs from the data's 16", rc=1)
        # refused where they would change nothing
        self.refused(["check", "--backend", "cpu", "--model", gpt2, "--vocab-size", "50"],
                     "--vocab-size is for --preset")
        for option in (["--optimizer", "sgd"], ["--dropout", "0.1"], ["--decay-all"],
                       ["--grad-accum", "2"]):
            self.refused(["check"] + preset + option,
                         option[0] + " has no effect without --train")
        for option in (["--cache-dir", "x"], ["--retry-failed"]):
            self.refused(["check"] + preset + option, "compiles nothing")




if __name__ == "__main__":
    sys.exit(cli_util.main("--models", "--source"))
