#!/usr/bin/env python3
"""Every in-tree plugin compiles from the installed SDK's headers alone
(standard library only).

usage: test_plugin_headers.py --cmake CMAKE --build-dir DIR --source-dir DIR
                              --cc CC --plugins FILE [unittest args]

Installs the SDK headers into a temporary prefix (`cmake --install
--component sdk_headers`), copies each plugin's folder out of the tree, and
compiles each of its C sources with -fsyntax-only against the copy, the
installed include folder and the system folders the build gives it (the
CUDA toolkit's, Khronos' OpenCL headers), nothing else. FILE (written by
tests/sdk/CMakeLists.txt) lists each plugin target's sources, definitions
and include folders as the build compiles them; an include folder inside
the source or build tree other than the SDK's and the plugin's own fails
too, so the build cannot quietly give a plugin the core's headers back.
"""
import argparse
import concurrent.futures
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

CFG = None
PREFIX = None  # the temporary install prefix (set up once)
TMP = None

# gcc: "fatal error: hal/status.h: No such file or directory";
# clang: "fatal error: 'hal/status.h' file not found".
MISSING = re.compile(r"fatal error: (?:([^:\s']+): No such file or directory|'([^']+)' file not found)")


def read_plugins(path):
    """{target: {"dir": ..., "src": [...], "def": [...], "inc": [...]}} from the
    file tests/sdk/CMakeLists.txt generates: 'target key=v1|v2' lines."""
    plugins = {}
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            target, rest = line.split(" ", 1)
            key, _, value = rest.partition("=")
            entry = plugins.setdefault(target, {"dir": "", "src": [], "def": [], "inc": []})
            if key == "dir":
                entry["dir"] = value
            else:
                entry[key] = [v for v in value.split("|") if v]
    return plugins


def inside(path, folder):
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder + os.sep)


def plan(target, entry, copy_dir, prefix):
    """The compile commands of one plugin against its copy and the installed
    SDK, or a list of problems with the build's include folders."""
    problems = []
    own = os.path.realpath(entry["dir"])
    flags = ["-I", os.path.join(prefix, "include"), "-I", copy_dir]
    for inc in entry["inc"]:
        if inside(inc, os.path.join(CFG.build_dir, "include")) or os.path.realpath(inc) == own:
            continue  # the staged SDK (replaced by the installed one); the plugin's folder
        if inside(inc, CFG.source_dir) or inside(inc, CFG.build_dir):
            problems.append("%s: include folder %s is neither the SDK's nor the plugin's own; "
                            "a plugin sees only <trainyard/...> and its folder "
                            "(drop it from the target's include folders)" % (target, inc))
            continue
        flags += ["-isystem", inc]
    flags += ["-D" + d for d in entry["def"]]
    commands = []
    for src in entry["src"]:
        if not src.endswith(".c"):
            continue
        path = src if os.path.isabs(src) else os.path.join(own, src)
        if inside(path, own):
            shown = os.path.relpath(path, CFG.source_dir)
            path = os.path.join(copy_dir, os.path.relpath(path, own))
        else:
            # Generated in the build tree (embedded kernels): compiled in place.
            shown = os.path.relpath(path, CFG.build_dir)
        commands.append((shown, [CFG.cc, "-std=c11", "-fsyntax-only"] + flags + [path]))
    return commands, problems


def compile_all(commands):
    """Runs the commands two at a time; returns one message per failure."""
    def one(item):
        shown, cmd = item
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode == 0:
            return None
        missing = MISSING.search(r.stderr)
        if missing:
            return ("%s includes %s, which the installed SDK (%s/include/trainyard) does not "
                    "have: include an SDK header as \"trainyard/<name>.h\", or export it "
                    "(TY_SDK_HEADERS in cmake/TrainyardPlugin.cmake)"
                    % (shown, missing.group(1) or missing.group(2), PREFIX))
        return "%s does not compile against the installed SDK:\n%s" % (shown, r.stderr[-3000:])
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        return [m for m in pool.map(one, commands) if m]


def copy_plugin(entry, name):
    dst = os.path.join(TMP, "src", name)
    if not os.path.isdir(dst):
        shutil.copytree(entry["dir"], dst)
    return dst


class PluginHeadersTest(unittest.TestCase):
    def test_every_intree_plugin_is_listed(self):
        plugins = read_plugins(CFG.plugins)
        names = {t[len("ty_backend_"):] for t in plugins if t.startswith("ty_backend_")}
        self.assertEqual(names, set(CFG.intree.split(",")), CFG.plugins)

    def test_plugins_compile_from_installed_sdk(self):
        plugins = read_plugins(CFG.plugins)
        problems, commands = [], []
        for target, entry in sorted(plugins.items()):
            copy_dir = copy_plugin(entry, os.path.basename(entry["dir"]))
            cmds, bad = plan(target, entry, copy_dir, PREFIX)
            self.assertTrue(cmds, "%s: no C sources listed" % target)
            commands += cmds
            problems += bad
        problems += compile_all(commands)
        self.assertEqual(problems, [], "\n".join(problems))

    def test_core_include_is_named(self):
        """A plugin source that includes a core header fails, naming the file
        and the header (the check above can fail)."""
        plugins = read_plugins(CFG.plugins)
        entry = plugins["ty_backend_template"]
        copy_dir = os.path.join(TMP, "bad-template")
        shutil.copytree(entry["dir"], copy_dir)
        src = os.path.join(copy_dir, "template_backend.c")
        with open(src) as f:
            text = f.read()
        with open(src, "w") as f:
            f.write('#include "hal/status.h"\n' + text)
        cmds, problems = plan("ty_backend_template", entry, copy_dir, PREFIX)
        self.assertEqual(problems, [])
        failures = compile_all(cmds)
        self.assertEqual(len(failures), 1, failures)
        self.assertIn("backends/template/template_backend.c includes hal/status.h", failures[0])
        self.assertIn("TY_SDK_HEADERS", failures[0])

    def test_source_root_include_is_named(self):
        plugins = read_plugins(CFG.plugins)
        entry = dict(plugins["ty_backend_template"])
        entry["inc"] = entry["inc"] + [CFG.source_dir]
        _, problems = plan("ty_backend_template", entry, TMP, PREFIX)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("include folder %s is neither the SDK's nor the plugin's own"
                      % CFG.source_dir, problems[0])


def main():
    global CFG, PREFIX, TMP
    parser = argparse.ArgumentParser()
    parser.add_argument("--cmake", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--cc", required=True)
    parser.add_argument("--plugins", required=True)
    parser.add_argument("--intree", required=True, help="cpu,dataflow,... (TY_INTREE_PLUGINS)")
    CFG, rest = parser.parse_known_args()
    CFG.build_dir = os.path.realpath(CFG.build_dir)
    CFG.source_dir = os.path.realpath(CFG.source_dir)
    with tempfile.TemporaryDirectory(prefix="ty-sdk-headers-") as tmp:
        TMP = tmp
        PREFIX = os.path.realpath(os.path.join(tmp, "prefix"))
        subprocess.run([CFG.cmake, "--install", CFG.build_dir, "--prefix", PREFIX,
                        "--component", "sdk_headers"], check=True, capture_output=True)
        result = unittest.main(argv=[sys.argv[0]] + rest, exit=False).result
    sys.exit(unittest_exit.exit_code(result))


if __name__ == "__main__":
    main()
