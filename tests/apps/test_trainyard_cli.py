#!/usr/bin/env python3
"""End-to-end tests of the `trainyard` command (standard library only).

usage: test_trainyard_cli.py --trainyard EXE --plugin-dir DIR --rogue-dir DIR
                             --install-dir DIR --version X.Y.Z [unittest args]

The text and JSON forms of `trainyard devices` are parsed and compared with
each other; rogue plugins (tests/plugins) must show up as rejected in both
while cpu and template still load. Exits 77 (ctest: skipped) with the reason
when an installed Trainyard's plugins would be searched before the build
tree's, since every expectation here would then be off.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

# 0, 1 or 77 (skipped) for ctest (tests/common/unittest_exit.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import unittest_exit  # noqa: E402

CFG = None  # parsed command-line configuration, set in main()

# What each rogue candidate in the rogue folder must be rejected as.
ROGUE_KINDS = {
    "libty_backend_garbage.so": "dlopen-failed",
    "libty_backend_rogue_abi.so": "abi-mismatch",
    "libty_backend_rogue_create_failed.so": "create-failed",
    "libty_backend_rogue_mismatch.so": "invalid-table",
    "libty_backend_rogue_missing.so": "invalid-table",
    "libty_backend_rogue_noentry.so": "no-entry-point",
    "libty_backend_rogue_null.so": "query-returned-null",
    "libty_backend_rogue_small.so": "table-too-small",
    "libty_backend_rogue_unavailable.so": "unavailable",
}
KNOWN_DTYPES = {"f32", "bf16", "f16", "f64", "i32", "i64", "u8"}

# In-tree plugins built only where their headers are found, whose runtime a
# machine may lack (then they are rejected as "unavailable"). The checks of
# the plugin folder below are about cpu and template and leave these out;
# tests/backends checks them.
OPTIONAL_BACKENDS = {"opencl", "cuda"}


def rejected_name(r):
    """A rejected candidate's backend name: the JSON's, or (the text form
    lists only paths) the one its file name gives."""
    if "name" in r:
        return r["name"]
    m = re.match(r"^libty_backend_(\w+)\.so$", os.path.basename(r["path"]))
    return m.group(1) if m else ""


def core_only(data):
    """`devices --json` data without the optional in-tree plugins."""
    out = dict(data)
    out["backends"] = [b for b in data["backends"] if b["name"] not in OPTIONAL_BACKENDS]
    out["rejected"] = [r for r in data["rejected"]
                       if not (r["kind"] == "unavailable" and
                               rejected_name(r) in OPTIONAL_BACKENDS)]
    return out


def run(args, env=None, exe=None):
    """Runs trainyard with a clean plugin environment plus `env`."""
    full_env = dict(os.environ)
    full_env["TRAINYARD_BACKEND_PATH"] = ""
    full_env.update(env or {})
    return subprocess.run([exe or CFG.trainyard] + args, capture_output=True,
                          text=True, env=full_env, timeout=60)


class TextFormatError(Exception):
    pass


def parse_devices_text(text):
    """Parses `trainyard devices` text into the shape of its JSON form."""
    out = {"backends": [], "rejected": [], "search_dirs": []}
    section = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^Backends \((\d+) loaded; host plugin ABI (\d+)\.(\d+)\):$", line)
        if m:
            section = "backends"
            out["backend_count"] = int(m.group(1))
            out["host_abi"] = {"major": int(m.group(2)), "minor": int(m.group(3))}
            i += 1
            continue
        m = re.match(r"^Rejected candidates \((\d+)\):$", line)
        if m:
            section = "rejected"
            out["rejected_count"] = int(m.group(1))
            i += 1
            continue
        m = re.match(r"^Search folders:(.*)$", line)
        if m:
            rest = m.group(1).strip()
            out["search_dirs"] = [] if rest == "(none)" else rest.split(", ")
            section = "done"
            i += 1
            continue
        if line == "  (none)" and section in ("backends", "rejected"):
            i += 1
            continue
        if section == "backends":
            m = re.match(r"^  (\S+) (\S+) \(ABI (\d+)\.(\d+)\) (.+)$", line)
            if m:
                out["backends"].append({
                    "name": m.group(1), "version": m.group(2),
                    "abi": {"major": int(m.group(3)), "minor": int(m.group(4))},
                    "path": m.group(5), "devices": [], "warnings": []})
                i += 1
                continue
            if line.startswith("    warning: ") and out["backends"]:
                out["backends"][-1]["warnings"].append(line[len("    warning: "):])
                i += 1
                continue
            m = re.match(r"^    (\S+)\s+(.*?)( \[emulated\])?$", line)
            if m and out["backends"] and not line.startswith("    error:"):
                device = {"uri": m.group(1), "name": m.group(2),
                          "emulated": m.group(3) is not None}
                details = re.match(
                    r"^      vendor (.*), kind (\S+), (\d+) compute units, "
                    r"([\d.]+) GiB, driver (.*)$", lines[i + 1] if i + 1 < len(lines) else "")
                dtypes = re.match(r"^      dtypes ([^ ]*?)(?:, peak f32 (\d+) GFLOP/s)?$",
                                  lines[i + 2] if i + 2 < len(lines) else "")
                if not details or not dtypes:
                    raise TextFormatError("device %s lacks its detail lines" % device["uri"])
                device["vendor"] = details.group(1)
                device["kind"] = details.group(2)
                device["compute_units"] = int(details.group(3))
                device["gib"] = float(details.group(4))
                device["driver_version"] = details.group(5)
                device["dtypes"] = dtypes.group(1).split(",") if dtypes.group(1) else []
                device["peak_gflops"] = int(dtypes.group(2)) if dtypes.group(2) else 0
                i += 3
                # Devices whose runtime reports them (OpenCL) add these lines.
                device["api_version"] = ""
                device["extensions"] = []
                if i < len(lines) and lines[i].startswith("      api "):
                    device["api_version"] = lines[i][len("      api "):]
                    i += 1
                if i < len(lines) and lines[i].startswith("      extensions "):
                    device["extensions"] = lines[i][len("      extensions "):].split(" ")
                    i += 1
                out["backends"][-1]["devices"].append(device)
                continue
        if section == "rejected":
            m = re.match(r"^  (.+) \[([a-z-]+)\]$", line)
            reason = lines[i + 1] if i + 1 < len(lines) else ""
            if m and reason.startswith("    "):
                out["rejected"].append({"path": m.group(1), "kind": m.group(2),
                                        "reason": reason[4:]})
                i += 2
                continue
        raise TextFormatError("unexpected line %d: %r" % (i + 1, line))
    if section != "done":
        raise TextFormatError("output ends before 'Search folders:'")
    return out


def devices_both(test, args_before=(), env=None, exe=None):
    """Runs `devices` and `devices --json`; checks both succeed quietly and
    agree; returns the parsed JSON."""
    text_run = run(list(args_before) + ["devices"], env=env, exe=exe)
    json_run = run(list(args_before) + ["devices", "--json"], env=env, exe=exe)
    for r in (text_run, json_run):
        test.assertEqual(r.returncode, 0, r.stderr)
        test.assertEqual(r.stderr, "", "the library and app must stay quiet on success")
    data = json.loads(json_run.stdout)
    text = parse_devices_text(text_run.stdout)
    assert_text_matches_json(test, text, data)
    return data


def assert_text_matches_json(test, text, data):
    test.assertEqual(text["host_abi"], data["host_abi"])
    test.assertEqual(text["backend_count"], len(data["backends"]))
    test.assertEqual(text["rejected_count"], len(data["rejected"]))
    test.assertEqual([b["name"] for b in text["backends"]],
                     [b["name"] for b in data["backends"]])
    for tb, jb in zip(text["backends"], data["backends"]):
        for key in ("version", "abi", "path", "warnings"):
            test.assertEqual(tb[key], jb[key], "backend %s: %s" % (jb["name"], key))
        test.assertEqual([d["uri"] for d in tb["devices"]],
                         [d["uri"] for d in jb["devices"]])
        for td, jd in zip(tb["devices"], jb["devices"]):
            for key in ("name", "emulated", "kind", "compute_units", "dtypes",
                        "driver_version", "api_version", "extensions"):
                test.assertEqual(td[key], jd[key], "%s: %s" % (jd["uri"], key))
            test.assertEqual(td["vendor"], jd["vendor"] or "unknown")
            test.assertAlmostEqual(td["gib"], jd["memory_bytes"] / 2**30, delta=0.05)
            test.assertEqual(td["peak_gflops"], round(jd.get("peak_f32_gflops", 0)))
    test.assertEqual(text["rejected"],
                     [{k: r[k] for k in ("path", "kind", "reason")} for r in data["rejected"]])
    test.assertEqual(text["search_dirs"], data["search_dirs"])


def rejected_by_file(data):
    return {os.path.basename(r["path"]): r for r in data["rejected"]}


class DevicesTest(unittest.TestCase):
    def assert_cpu_and_template(self, data):
        data = core_only(data)
        names = [b["name"] for b in data["backends"]]
        self.assertEqual(names, CFG.intree)
        for b in data["backends"]:
            self.assertTrue(os.path.isfile(b["path"]), b["path"])
            self.assertEqual(os.path.realpath(os.path.dirname(b["path"])),
                             os.path.realpath(CFG.plugin_dir))
            self.assertEqual(b["abi"], CFG.abi_dict)
            self.assertIsInstance(b["version"], str)
            self.assertRegex(b["version"], r"^\d+\.\d+\.\d+")
            self.assertNotIn("error", b)
            self.assertEqual(len(b["devices"]), 1)
            d = b["devices"][0]
            self.assertEqual(d["uri"], b["name"] + ":0")
            self.assertIsInstance(d["name"], str)
            self.assertTrue(d["name"])
            self.assertIsInstance(d["memory_bytes"], int)
            self.assertGreater(d["memory_bytes"], 0)
            self.assertIsInstance(d["dtypes"], list)
            self.assertIn("f32", d["dtypes"])
            self.assertLessEqual(set(d["dtypes"]), KNOWN_DTYPES)
            self.assertGreaterEqual(d["compute_units"], 1)
        kinds = {b["name"]: b["devices"][0]["kind"] for b in data["backends"]}
        self.assertEqual(kinds["cpu"], "cpu")
        self.assertTrue(data["backends"][names.index("template")]["devices"][0]["emulated"])
        if "dataflow" in kinds:
            self.assertEqual(kinds["dataflow"], "accelerator")
            self.assertTrue(data["backends"][names.index("dataflow")]["devices"][0]["emulated"])

    def assert_rogues_rejected(self, data):
        data = core_only(data)
        rejected = rejected_by_file(data)
        self.assertEqual(len(rejected), len(data["rejected"]),
                         "a candidate was rejected more than once")
        self.assertEqual({f: r["kind"] for f, r in rejected.items()}, ROGUE_KINDS)
        for f, r in rejected.items():
            self.assertEqual(os.path.realpath(os.path.dirname(r["path"])),
                             os.path.realpath(CFG.rogue_dir))
            self.assertTrue(r["reason"])
        self.assertIn("99", rejected["libty_backend_rogue_abi.so"]["reason"])
        self.assertIn("libfoo.so.1", rejected["libty_backend_rogue_unavailable.so"]["reason"])
        self.assertRegex(rejected["libty_backend_garbage.so"]["reason"],
                         "invalid ELF header|file too short")

    def test_text_lists_cpu_and_template(self):
        r = run(["devices"])
        self.assertEqual(r.returncode, 0, r.stderr)
        text = core_only(parse_devices_text(r.stdout))
        self.assertEqual([b["name"] for b in text["backends"]], CFG.intree)
        self.assertEqual([d["uri"] for b in text["backends"] for d in b["devices"]],
                         [name + ":0" for name in CFG.intree])
        self.assertEqual(text["rejected"], [])

    def test_json_describes_cpu_and_template(self):
        data = devices_both(self)
        self.assertEqual(data["trainyard_version"], CFG.version)
        self.assertEqual(data["host_abi"], CFG.abi_dict)
        self.assert_cpu_and_template(data)
        self.assertEqual(core_only(data)["rejected"], [])
        self.assertEqual([os.path.realpath(d) for d in data["search_dirs"]],
                         [os.path.realpath(CFG.plugin_dir)])

    def test_plugin_path_shows_rogues_as_rejected(self):
        for args in (["--plugin-path", CFG.rogue_dir], ["--plugin-path=" + CFG.rogue_dir]):
            with self.subTest(args=args):
                data = devices_both(self, args_before=args)
                self.assert_cpu_and_template(data)
                self.assert_rogues_rejected(data)
                self.assertEqual(os.path.realpath(data["search_dirs"][0]),
                                 os.path.realpath(CFG.rogue_dir))

    def test_env_path_shows_rogues_as_rejected(self):
        data = devices_both(self, env={"TRAINYARD_BACKEND_PATH": CFG.rogue_dir})
        self.assert_cpu_and_template(data)
        self.assert_rogues_rejected(data)

    def test_env_and_plugin_path_together_reject_once(self):
        data = devices_both(self, args_before=["--plugin-path", CFG.rogue_dir],
                            env={"TRAINYARD_BACKEND_PATH":
                                 CFG.rogue_dir + ":" + CFG.plugin_dir})
        self.assert_cpu_and_template(data)
        self.assert_rogues_rejected(data)

    def test_missing_plugin_path_is_reported(self):
        missing = "/nonexistent-trainyard-cli-test"
        data = devices_both(self, args_before=["--plugin-path", missing])
        self.assert_cpu_and_template(data)
        rejected = core_only(data)["rejected"]
        self.assertEqual(len(rejected), 1)
        self.assertEqual(rejected[0]["path"], missing)
        self.assertEqual(rejected[0]["kind"], "missing-path")

    def test_half_set_entry_pairs_warn(self):
        data = devices_both(self, args_before=["--plugin-path", CFG.unpaired_dir])
        by_name = {b["name"]: b for b in data["backends"]}
        warnings = by_name["unpaired"]["warnings"]
        self.assertEqual(len(warnings), 6, warnings)
        self.assertIn("comm_create is set but comm_broadcast is not", warnings[5])
        self.assertIn("device_open is set but device_close is not", warnings[0])
        self.assertIn("graph_compile is set but executable_destroy is not", warnings[3])
        for b in data["backends"]:
            self.assertRegex(b["identity"], r"^(build-id:[0-9a-f]{16,}|sha256:[0-9a-f]{64})$")
            if b["name"] != "unpaired":
                self.assertEqual(b["warnings"], [], b["name"])
        # Opening a device prints them too, before anything else happens.
        r = run(["--plugin-path", CFG.unpaired_dir, "conform", "--backend", "unpaired",
                 "--ops", "add"])
        self.assertIn("trainyard conform: warning: plugin 'unpaired' (", r.stderr)
        self.assertIn("device_open is set but device_close is not", r.stderr)
        r = run(["conform", "--backend", "cpu", "--ops", "add", "--dtype", "f32"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("warning", r.stderr)

    def unsafe_copy(self, mode):
        """The template plugin copied into a fresh folder of `mode`; returns
        (folder, the copy's path)."""
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        folder = os.path.join(tmp, "p")
        os.mkdir(folder)
        plugin = os.path.join(folder, "libty_backend_template.so")
        shutil.copy(os.path.join(CFG.plugin_dir, "libty_backend_template.so"), plugin)
        os.chmod(plugin, 0o755)
        os.chmod(folder, mode)
        return os.path.realpath(folder), plugin

    def loaded_from(self, data, name):
        return {b["name"]: b["path"] for b in data["backends"]}.get(name)

    def test_plugin_folder_writable_by_others_is_rejected(self):
        """Issue 33 (sshd's StrictModes): a plugin in a folder its group or
        others can write is not loaded (its constructor would run), and
        `devices` lists it with the reason; TRAINYARD_ALLOW_UNSAFE_PLUGIN_DIRS=1
        loads it; a folder of the user's alone (under the sticky /tmp) loads."""
        env_off = {"TRAINYARD_ALLOW_UNSAFE_PLUGIN_DIRS": ""}
        for mode in (0o777, 0o775, 0o757):
            with self.subTest(mode=oct(mode)):
                folder, plugin = self.unsafe_copy(mode)
                data = devices_both(self, args_before=["--plugin-path", folder], env=env_off)
                rejected = [r for r in data["rejected"] if r["path"] == plugin]
                self.assertEqual(len(rejected), 1, data["rejected"])
                self.assertEqual(rejected[0]["kind"], "unsafe-permissions")
                self.assertIn("folder %s is writable by its group or others (mode %04o)"
                              % (folder, mode), rejected[0]["reason"])
                self.assertIn("TRAINYARD_ALLOW_UNSAFE_PLUGIN_DIRS=1", rejected[0]["reason"])
                # the build's own template still loads
                self.assertEqual(os.path.realpath(self.loaded_from(data, "template")),
                                 os.path.realpath(os.path.join(CFG.plugin_dir,
                                                               "libty_backend_template.so")))
                data = devices_both(self, args_before=["--plugin-path", folder],
                                    env={"TRAINYARD_ALLOW_UNSAFE_PLUGIN_DIRS": "1"})
                self.assertEqual(self.loaded_from(data, "template"), plugin)
        folder, plugin = self.unsafe_copy(0o755)
        data = devices_both(self, args_before=["--plugin-path", folder], env=env_off)
        self.assertEqual(self.loaded_from(data, "template"), plugin)
        # The file itself, group-writable in a safe folder.
        os.chmod(plugin, 0o775)
        data = devices_both(self, args_before=["--plugin-path", plugin], env=env_off)
        rejected = [r for r in data["rejected"] if r["path"] == plugin]
        self.assertEqual([r["kind"] for r in rejected], ["unsafe-permissions"])
        self.assertIn("file %s is writable by its group or others (mode 0775)"
                      % os.path.realpath(plugin), rejected[0]["reason"])

    def test_plugin_of_another_user_is_rejected(self):
        """A plugin file owned by another user (not root) is refused even
        with mode 0755: its owner could replace it. Needs root to chown."""
        if os.geteuid() != 0:
            self.skipTest("needs root to give a plugin file to another user (uid 65534); "
                          "the group/other-writable case runs without root")
        folder, plugin = self.unsafe_copy(0o755)
        os.chown(plugin, 65534, -1)
        data = devices_both(self, args_before=["--plugin-path", folder],
                            env={"TRAINYARD_ALLOW_UNSAFE_PLUGIN_DIRS": ""})
        rejected = [r for r in data["rejected"] if r["path"] == plugin]
        self.assertEqual([r["kind"] for r in rejected], ["unsafe-permissions"])
        self.assertIn("file %s belongs to uid 65534, neither this user (uid 0) nor root"
                      % os.path.realpath(plugin), rejected[0]["reason"])

    def test_text_parser_rejects_drift(self):
        # The comparisons above rely on this parser noticing unknown lines.
        with self.assertRaises(TextFormatError):
            parse_devices_text("Backends (0 loaded; host plugin ABI 1.0):\n  (none)\n"
                               "something new\n")
        with self.assertRaises(TextFormatError):
            parse_devices_text("Backends (0 loaded; host plugin ABI 1.0):\n")


class UsageTest(unittest.TestCase):
    def assert_ok(self, args, *needles):
        r = run(args)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        for n in needles:
            self.assertIn(n, r.stdout)
        return r

    def assert_usage_error(self, args, *needles):
        r = run(args)
        self.assertEqual(r.returncode, 2, "stdout: %s\nstderr: %s" % (r.stdout, r.stderr))
        self.assertEqual(r.stdout, "")
        self.assertTrue(r.stderr.strip(), "a usage error must explain itself")
        for n in needles:
            self.assertIn(n, r.stderr)

    def test_help(self):
        for args in (["--help"], ["-h"], ["help"]):
            with self.subTest(args=args):
                self.assert_ok(args, "usage: trainyard", "devices", "--plugin-path",
                               "Exit codes")

    def test_version(self):
        r = self.assert_ok(["--version"], "trainyard " + CFG.version, "ABI " + CFG.abi)
        self.assertTrue(r.stdout.startswith("trainyard " + CFG.version + "\n"))

    def test_devices_help(self):
        for args in (["devices", "--help"], ["devices", "-h"], ["help", "devices"]):
            with self.subTest(args=args):
                self.assert_ok(args, "usage: trainyard devices", "--json")

    def test_unknown_command(self):
        self.assert_usage_error(["frobnicate"], "'frobnicate' is not a trainyard command")
        self.assert_usage_error(["help", "frobnicate"], "'frobnicate'")

    def test_unknown_global_option(self):
        self.assert_usage_error(["--frobnicate", "devices"], "unknown option '--frobnicate'")

    def test_unknown_devices_option(self):
        self.assert_usage_error(["devices", "--frobnicate"], "unknown option '--frobnicate'",
                                "trainyard devices --help")
        self.assert_usage_error(["devices", "-x"], "unknown option '-x'")

    def test_devices_extra_argument(self):
        self.assert_usage_error(["devices", "extra-arg"], "unexpected argument 'extra-arg'")
        self.assert_usage_error(["devices", "--json", "extra-arg"], "'extra-arg'")

    def test_no_command(self):
        self.assert_usage_error([], "usage: trainyard")

    def test_plugin_path_needs_a_value(self):
        self.assert_usage_error(["--plugin-path"], "--plugin-path needs a file or folder")
        self.assert_usage_error(["--plugin-path=", "devices"], "--plugin-path")


class NoPluginsTest(unittest.TestCase):
    def test_binary_alone_finds_no_plugins(self):
        with tempfile.TemporaryDirectory() as tmp:
            # <tmp>/bin/trainyard: <exe dir>/../lib/trainyard/backends is absent.
            os.mkdir(os.path.join(tmp, "bin"))
            exe = os.path.join(tmp, "bin", "trainyard")
            shutil.copy2(CFG.trainyard, exe)
            r = run(["devices"], exe=exe, env={"TRAINYARD_BACKEND_PATH": ""})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("Backends (0 loaded; host plugin ABI %s):\n  (none)\n" % CFG.abi, r.stdout)
            data = devices_both(self, exe=exe, env={"TRAINYARD_BACKEND_PATH": ""})
            self.assertEqual(data["backends"], [])
            self.assertEqual(data["rejected"], [])
            self.assertEqual(data["search_dirs"], [])


def installed_plugins(install_dir):
    return sorted(glob.glob(os.path.join(install_dir, "libty_backend_*.so")))


def main():
    global CFG
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--plugin-dir", required=True)
    parser.add_argument("--rogue-dir", required=True)
    parser.add_argument("--unpaired-dir", required=True)
    parser.add_argument("--install-dir", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--abi", required=True, help="host plugin ABI, MAJOR.MINOR")
    parser.add_argument("--intree-plugins", required=True,
                        help="the plugins of the build's plugin folder, comma-separated")
    CFG, rest = parser.parse_known_args()
    # The in-tree plugins every machine runs; optional ones (opencl) are
    # checked in tests/backends.
    CFG.intree = [n for n in CFG.intree_plugins.split(",") if n not in OPTIONAL_BACKENDS]
    major, minor = CFG.abi.split(".")
    CFG.abi_dict = {"major": int(major), "minor": int(minor)}
    found = installed_plugins(CFG.install_dir)
    if found:
        print("SKIP: plugins are installed in %s (%s); trainyard searches them "
              "before the build tree, so these expectations do not hold. "
              "Uninstall them or configure with another CMAKE_INSTALL_PREFIX."
              % (CFG.install_dir, ", ".join(os.path.basename(f) for f in found)))
        return 77
    program = unittest.main(argv=[sys.argv[0], "-v"] + rest, exit=False)
    return unittest_exit.exit_code(program.result)


if __name__ == "__main__":
    sys.exit(main())
