#!/usr/bin/env python3
"""Every entry that tests/costs/ctest_costs.cmake names exists in this
build's test list and carries its COST (ctest ignores a name that matches
no entry, so a renamed or removed entry would quietly lose its place at the
front of the queue). Usage: check_costs.py CTEST BUILD_DIR COSTS_FILE"""
import json
import re
import subprocess
import sys


def listed_costs(path):
    """The (name, seconds) pairs of the file's set(_ty_costs ...) list."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    body = re.search(r"set\(_ty_costs\s+(.*?)\)", text, re.S)
    if not body:
        raise SystemExit("%s: no set(_ty_costs ...) list" % path)
    words = body.group(1).split()
    if len(words) % 2:
        raise SystemExit("%s: the list has a name without its cost" % path)
    return [(words[i], float(words[i + 1])) for i in range(0, len(words), 2)]


def main():
    ctest, build, path = sys.argv[1:4]
    r = subprocess.run([ctest, "--show-only=json-v1"], cwd=build, capture_output=True, text=True)
    if r.returncode != 0:
        print("ctest --show-only failed: %s" % r.stderr, file=sys.stderr)
        return 1
    costs = {}
    for test in json.loads(r.stdout)["tests"]:
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        costs[test["name"]] = props.get("COST")
    bad = []
    listed = listed_costs(path)
    for name, seconds in listed:
        if name not in costs:
            bad.append("%s: no such ctest entry (renamed or removed? update %s)" % (name, path))
        elif costs[name] != seconds:
            bad.append("%s: COST %s, not the listed %g" % (name, costs[name], seconds))
    print("%d entries have a COST from %s" % (len(listed) - len(bad), path))
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
