#!/usr/bin/env python3
"""The mutant list of scripts/mutate.sh stays usable (ctest mutate_list_check).

Every mutant's original text must occur exactly once in its file: a code
change that moves or duplicates an anchor fails here, in seconds, instead of
in the next mutation run. The checker's own refusals (a lost anchor, a
repeated one, a reused id, an empty field, too few mutants) are triggered on
small lists in a temporary tree and their messages read.
Usage: test_mutate_list.py SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(SOURCE, "scripts", "mutate.py")
LIST = os.path.join(SOURCE, "scripts", "mutants.json")


def check(*args):
    return subprocess.run([sys.executable, SCRIPT, "--check", *args], capture_output=True,
                          text=True, timeout=60)


def mutant(i, **kw):
    m = {"id": "m%d" % i, "file": "a.c", "original": "x%d = %d;" % (i, i),
         "replacement": "x%d = %d;" % (i, i + 1), "tests": "^t$", "layer": "hal",
         "kind": "off-by-one", "description": "d", "explanation": "e"}
    m.update(kw)
    return m


class MutantListTest(unittest.TestCase):
    def test_the_repository_list_is_whole(self):
        r = check("--source", SOURCE, "--mutants", LIST)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("every anchor found once", r.stdout)
        with open(LIST, encoding="utf-8") as f:
            mutants = json.load(f)["mutants"]
        self.assertGreaterEqual(len(mutants), 60)
        layers = {m["layer"] for m in mutants}
        for layer in ("hal", "ops", "graph", "backends/common", "backends/cpu", "models",
                      "dist", "apps"):
            self.assertIn(layer, layers)

    def run_list(self, mutants, source_text):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "a.c"), "w") as f:
                f.write(source_text)
            path = os.path.join(tmp, "mutants.json")
            with open(path, "w") as f:
                json.dump({"mutants": mutants}, f)
            return check("--source", tmp, "--mutants", path)

    def source(self, n):
        return "".join("x%d = %d;\n" % (i, i) for i in range(n))

    def test_a_good_list_passes(self):
        r = self.run_list([mutant(i) for i in range(60)], self.source(60))
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_lost_anchor(self):
        ms = [mutant(i) for i in range(60)]
        ms[7]["original"] = "gone();"
        r = self.run_list(ms, self.source(60))
        self.assertEqual(r.returncode, 1)
        self.assertIn("m7: the original text occurs 0 times in a.c", r.stderr)

    def test_repeated_anchor(self):
        r = self.run_list([mutant(i) for i in range(60)], self.source(60) + "x3 = 3;\n")
        self.assertEqual(r.returncode, 1)
        self.assertIn("m3: the original text occurs 2 times in a.c", r.stderr)

    def test_reused_id(self):
        ms = [mutant(i) for i in range(60)]
        ms[5]["id"] = "m4"
        r = self.run_list(ms, self.source(60))
        self.assertEqual(r.returncode, 1)
        self.assertIn("id 'm4' is used twice", r.stderr)

    def test_empty_field(self):
        ms = [mutant(i) for i in range(60)]
        ms[2]["explanation"] = " "
        r = self.run_list(ms, self.source(60))
        self.assertEqual(r.returncode, 1)
        self.assertIn("(m2): field 'explanation' is missing or empty", r.stderr)

    def test_too_few(self):
        r = self.run_list([mutant(i) for i in range(59)], self.source(59))
        self.assertEqual(r.returncode, 1)
        self.assertIn("59 mutants; the list must keep at least 60", r.stderr)

    def test_usage_error_exits_2(self):
        r = subprocess.run([sys.executable, SCRIPT, "--jobs", "0"], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--jobs must be at least 1", r.stderr)


if __name__ == "__main__":
    unittest.main()
