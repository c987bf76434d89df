#!/usr/bin/env python3
"""Every ctest entry that runs a Python unittest script has SKIP_RETURN_CODE
77: such a script exits 77 when a test skipped and none failed
(tests/common/unittest_exit.py), and without the property ctest would call
that a failure, or, worse, a script that printed its skip and exited 0 a
pass. Reads the build's own test list (`ctest --show-only=json-v1`), so an
entry added anywhere is held. Usage: check_skip_codes.py CTEST BUILD_DIR"""
import json
import os
import re
import subprocess
import sys


def unittest_script(path, cache={}):
    """Whether the script at `path` runs unittest: it says so, or imports a
    module beside it that does (cli_util.py's main(), test_train_cli.py's)."""
    if path not in cache:
        cache[path] = False
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError:
            return False
        folder = os.path.dirname(path)
        siblings = [os.path.join(folder, m + ".py")
                    for m in re.findall(r"^\s*(?:import|from)\s+(\w+)", text, re.M)]
        cache[path] = "unittest" in text or any(
            os.path.isfile(s) and unittest_script(s) for s in siblings)
    return cache[path]


def main():
    ctest, build = sys.argv[1:3]
    r = subprocess.run([ctest, "--show-only=json-v1"], cwd=build, capture_output=True, text=True)
    if r.returncode != 0:
        print("ctest --show-only failed: %s" % r.stderr, file=sys.stderr)
        return 1
    bad, checked = [], 0
    for test in json.loads(r.stdout)["tests"]:
        scripts = [a for a in test.get("command", []) if a.endswith(".py") and os.path.isfile(a)
                   and os.path.realpath(a) != os.path.realpath(__file__)]
        if not any(unittest_script(s) for s in scripts):
            continue
        checked += 1
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        if str(props.get("SKIP_RETURN_CODE")) != "77":
            bad.append("%s (%s)" % (test["name"], os.path.basename(scripts[0])))
    print("%d entries run a Python unittest script" % checked)
    for name in bad:
        print("missing SKIP_RETURN_CODE 77: " + name, file=sys.stderr)
    if checked == 0:
        print("no entry runs a Python unittest script: the check found nothing", file=sys.stderr)
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
