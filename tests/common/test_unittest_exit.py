#!/usr/bin/env python3
"""unittest_exit.py: what a Python test script tells ctest. A script whose
one test skips exits 77 and prints `SKIPPED: <test id>: <reason>` on
stderr; a failure beside a skip is 1; all passed is 0; no test run (a
misspelt suite) is 1."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import unittest_exit  # noqa: E402

SCRIPT = """
import sys, unittest
sys.path.insert(0, %r)
import unittest_exit

class T(unittest.TestCase):
    def test_pass(self):
        pass
    def test_skip(self):
        self.skipTest("no widget here")
    def test_fail(self):
        self.fail("broken")

sys.exit(unittest_exit.run([sys.argv[0]] + sys.argv[1:]))
""" % HERE


class ExitCodeTest(unittest.TestCase):
    def run_script(self, *tests):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.py")
            with open(path, "w") as f:
                f.write(SCRIPT)
            return subprocess.run([sys.executable, path] + list(tests), capture_output=True,
                                  text=True, timeout=60)

    def test_codes(self):
        r = self.run_script("T.test_pass")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("SKIPPED", r.stderr)
        r = self.run_script("T.test_pass", "T.test_skip")
        self.assertEqual(r.returncode, 77, r.stderr)
        self.assertIn("SKIPPED: __main__.T.test_skip: no widget here", r.stderr)
        r = self.run_script("T.test_skip", "T.test_fail")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("SKIPPED: __main__.T.test_skip: no widget here", r.stderr)
        r = self.run_script("T")
        self.assertEqual(r.returncode, 1, r.stderr)

    def test_no_test_run_fails(self):
        result = unittest.TestResult()
        self.assertEqual(unittest_exit.exit_code(result), 1)


if __name__ == "__main__":
    sys.exit(unittest_exit.run([sys.argv[0]] + sys.argv[1:]))
