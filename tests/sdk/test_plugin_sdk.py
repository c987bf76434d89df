#!/usr/bin/env python3
"""The plugin SDK as a plugin author gets it (standard library only).

usage: test_plugin_sdk.py --cmake CMAKE --build-dir DIR --source-dir DIR --cc CC
                          [--sanitize LIST] --install-dir DIR [unittest args]

Installs the build into a temporary prefix (`cmake --install --prefix`),
then, against that prefix only: compiles every SDK header on its own; builds
examples/out-of-tree-plugin with CMake (find_package(Trainyard) through
CMAKE_PREFIX_PATH) and with pkg-config (its Makefile); builds the template
plugin's installed source out of tree; loads each with --plugin-path into the
installed trainyard and runs conform on it. Exits 77 (ctest: skipped) with
the reason when plugins in the configured install folder would be searched
before the temporary prefix's own.
"""
import argparse
import glob
import json
import os
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


def sh(args, cwd=None, env=None, timeout=300):
    r = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s\n%s" % (" ".join(args), r.returncode,
                                                        r.stdout[-4000:], r.stderr[-4000:]))
    return r


def trainyard(*args, rc=0):
    env = dict(os.environ, TRAINYARD_BACKEND_PATH="")
    r = subprocess.run([os.path.join(PREFIX, "bin", "trainyard")] + list(args),
                       capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != rc:
        raise AssertionError("trainyard %s exited %d, not %d:\n%s\n%s" % (
            " ".join(args), r.returncode, rc, r.stdout[-3000:], r.stderr[-3000:]))
    return r


def conform_rows(test, plugin, backend, *extra):
    r = trainyard("--plugin-path", plugin, "conform", "--backend", backend, "--seed", "7",
                  "--json", *extra)
    rows = json.loads(r.stdout)
    statuses = {row["status"] for row in rows}
    test.assertLessEqual(statuses, {"pass", "unsupported"}, r.stdout[:2000])
    return rows


class SdkTest(unittest.TestCase):
    def test_installed_files(self):
        for rel in ["include/trainyard/backend_abi.h", "include/trainyard/philox.h",
                    "include/trainyard/half.h", "include/trainyard/host_executor.h",
                    "include/trainyard/host_buffers.h", "include/trainyard/abi_graph.h",
                    "include/trainyard/memory_plan.h", "include/trainyard/plugin_status.h",
                    "lib/cmake/Trainyard/TrainyardConfig.cmake",
                    "lib/cmake/Trainyard/TrainyardPluginHelpers.cmake",
                    "share/doc/trainyard/plugin-abi.md",
                    "share/doc/trainyard/examples/out-of-tree-plugin/example_backend.c"]:
            self.assertTrue(os.path.isfile(os.path.join(PREFIX, rel)), rel)
        archives = (glob.glob(os.path.join(PREFIX, "lib*", "libty_backend_support.a")) +
                    glob.glob(os.path.join(PREFIX, "lib*", "*", "libty_backend_support.a")))
        self.assertEqual(len(archives), 1, archives)
        # No header of the core leaks into the SDK.
        headers = os.listdir(os.path.join(PREFIX, "include", "trainyard"))
        for h in headers:
            text = open(os.path.join(PREFIX, "include", "trainyard", h)).read()
            for line in text.splitlines():
                if line.startswith('#include "'):
                    self.assertTrue(line.startswith('#include "trainyard/'), (h, line))

    def test_each_header_compiles_alone(self):
        for h in sorted(os.listdir(os.path.join(PREFIX, "include", "trainyard"))):
            src = "#include <trainyard/%s>\nint ty_sdk_probe;\n" % h
            r = subprocess.run([CFG.cc, "-std=c11", "-Wall", "-Wextra", "-Werror",
                                "-fsyntax-only", "-I", os.path.join(PREFIX, "include"),
                                "-x", "c", "-"], input=src, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, "%s: %s" % (h, r.stderr))

    def test_version_names_the_sdk(self):
        out = trainyard("--version").stdout
        self.assertIn("plugin include: -I%s " % os.path.join(PREFIX, "include"), out)
        self.assertIn("plugin folder: %s\n" % os.path.join(PREFIX, "lib", "trainyard", "backends"),
                      out)

    def test_pkg_config(self):
        env = dict(os.environ, PKG_CONFIG_PATH=self.pc_dir())
        cflags = sh(["pkg-config", "--cflags", "trainyard-plugin"], env=env).stdout.split()
        self.assertIn("-fvisibility=hidden", cflags)
        inc = [f[2:] for f in cflags if f.startswith("-I")]
        self.assertEqual([os.path.realpath(i) for i in inc], [os.path.join(PREFIX, "include")])
        libs = sh(["pkg-config", "--libs", "trainyard-plugin"], env=env).stdout.split()
        self.assertIn("-lty_backend_support", libs)
        plugindir = sh(["pkg-config", "--variable=plugindir", "trainyard-plugin"],
                       env=env).stdout.strip()
        self.assertEqual(os.path.realpath(plugindir),
                         os.path.join(PREFIX, "lib", "trainyard", "backends"))

    def pc_dir(self):
        found = glob.glob(os.path.join(PREFIX, "lib*", "pkgconfig", "trainyard-plugin.pc")) + \
            glob.glob(os.path.join(PREFIX, "lib*", "*", "pkgconfig", "trainyard-plugin.pc"))
        self.assertEqual(len(found), 1, found)
        return os.path.dirname(found[0])

    def copy_example(self, tmp):
        src = os.path.join(PREFIX, "share", "doc", "trainyard", "examples", "out-of-tree-plugin")
        dst = os.path.join(tmp, "example")
        shutil.copytree(src, dst)
        return dst

    def check_example(self, plugin):
        r = trainyard("--plugin-path", plugin, "devices")
        self.assertIn("example 0.1.0", r.stdout)
        rows = conform_rows(self, plugin, "example")
        passed = {(row["op"], row["direction"]) for row in rows if row["status"] == "pass"}
        for want in [("add", "forward"), ("mul", "forward"), ("scale", "forward"),
                     ("gelu", "forward"), ("gelu", "backward"), ("gelu_backward", "forward"),
                     ("matmul", "forward"), ("matmul", "backward")]:
            self.assertIn(want, passed)
        unsupported = [row for row in rows if row["status"] == "unsupported"]
        self.assertTrue(unsupported)
        self.assertTrue(all("example: " in row["reason"] for row in unsupported))

    def test_example_with_cmake(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = self.copy_example(tmp)
            build = os.path.join(tmp, "build")
            sh([CFG.cmake, "-S", src, "-B", build, "-G", "Ninja",
                "-DCMAKE_C_COMPILER=" + CFG.cc, "-DCMAKE_PREFIX_PATH=" + PREFIX,
                "-DCMAKE_INSTALL_PREFIX=" + os.path.join(tmp, "inst")])
            sh([CFG.cmake, "--build", build])
            plugin = os.path.join(build, "libty_backend_example.so")
            self.check_example(plugin)
            # trainyard_add_backend_plugin installs into <prefix>/lib/trainyard/backends.
            sh([CFG.cmake, "--install", build])
            self.assertTrue(os.path.isfile(os.path.join(
                tmp, "inst", "lib", "trainyard", "backends", "libty_backend_example.so")))
            if not CFG.sanitize:
                nm = subprocess.run(["nm", "-D", "--defined-only", plugin],
                                    capture_output=True, text=True).stdout
                self.assertEqual([l.split()[-1] for l in nm.splitlines() if l.strip()],
                                 ["ty_backend_query"])

    def test_example_with_pkg_config(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = self.copy_example(tmp)
            make = ["make", "-C", src, "CC=" + CFG.cc, "PKG_CONFIG_PATH=" + self.pc_dir()]
            if CFG.sanitize:
                make.append("ZDEFS=")  # sanitizer runtimes leave symbols undefined
            sh(make)
            self.check_example(os.path.join(src, "libty_backend_example.so"))

    def test_template_out_of_tree(self):
        """The template's installed source builds against the SDK alone."""
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "template")
            os.makedirs(src)
            shutil.copy(os.path.join(PREFIX, "share", "doc", "trainyard", "examples", "template",
                                     "template_backend.c"), src)
            with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
                f.write("cmake_minimum_required(VERSION 3.20)\nproject(t C)\n"
                        "find_package(Trainyard REQUIRED)\n"
                        "trainyard_add_backend_plugin(template SOURCES template_backend.c)\n")
            build = os.path.join(tmp, "build")
            sh([CFG.cmake, "-S", src, "-B", build, "-G", "Ninja", "-DCMAKE_C_COMPILER=" + CFG.cc,
                "-DCMAKE_PREFIX_PATH=" + PREFIX])
            sh([CFG.cmake, "--build", build])
            rows = conform_rows(self, os.path.join(build, "libty_backend_template.so"),
                                "template", "--ops", "matmul")
            self.assertTrue(rows)
            self.assertEqual({row["status"] for row in rows}, {"pass"})


def main():
    global CFG, PREFIX
    parser = argparse.ArgumentParser()
    parser.add_argument("--cmake", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--cc", required=True)
    parser.add_argument("--sanitize", default="")
    parser.add_argument("--install-dir", required=True)
    CFG, rest = parser.parse_known_args()
    if glob.glob(os.path.join(CFG.install_dir, "libty_backend_*.so")):
        print("skipped: %s holds plugins, which an installed trainyard searches before its "
              "own folder" % CFG.install_dir)
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="ty-sdk-") as tmp:
        PREFIX = os.path.realpath(os.path.join(tmp, "prefix"))
        sh([CFG.cmake, "--install", CFG.build_dir, "--prefix", PREFIX])
        result = unittest.main(argv=[sys.argv[0]] + rest, exit=False).result
    sys.exit(unittest_exit.exit_code(result))


if __name__ == "__main__":
    main()
