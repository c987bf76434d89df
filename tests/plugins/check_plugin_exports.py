#!/usr/bin/env python3
"""Checks that every plugin in a folder exports exactly one dynamic symbol,
ty_backend_query (the plugin ABI's rule; everything else must be hidden).

usage: check_plugin_exports.py --nm NM --plugin-dir DIR --expect NAME...
                               [--known-bad FILE]

--expect names plugins that must be present (so an empty folder fails).
--known-bad is a plugin that breaks the rule; the check must flag it, which
shows the checker can fail.
"""
import argparse
import glob
import os
import subprocess
import sys

WANTED = {"ty_backend_query"}


def exported_symbols(nm, path):
    out = subprocess.run([nm, "-D", "--defined-only", path], check=True,
                         capture_output=True, text=True).stdout
    symbols = set()
    for line in out.splitlines():
        fields = line.split()
        if fields:
            symbols.add(fields[-1].split("@")[0])  # drop symbol versions
    return symbols


def problem(nm, path):
    """None when `path` exports exactly WANTED, else a description."""
    symbols = exported_symbols(nm, path)
    if symbols == WANTED:
        return None
    extra = sorted(symbols - WANTED)
    missing = sorted(WANTED - symbols)
    return "%s: extra exports %s, missing %s" % (path, extra, missing)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nm", required=True)
    parser.add_argument("--plugin-dir", required=True)
    parser.add_argument("--expect", action="append", default=[])
    parser.add_argument("--known-bad")
    args = parser.parse_args()

    plugins = sorted(glob.glob(os.path.join(args.plugin_dir, "*.so")))
    names = {os.path.basename(p)[len("libty_backend_"):-len(".so")] for p in plugins}
    failures = []
    for name in args.expect:
        if name not in names:
            failures.append("expected plugin %s is not in %s" % (name, args.plugin_dir))
    for path in plugins:
        p = problem(args.nm, path)
        print("%s: %s" % (os.path.basename(path), p or "exports only ty_backend_query"))
        if p:
            failures.append(p)
    if args.known_bad:
        if problem(args.nm, args.known_bad) is None:
            failures.append("checker did not flag the known-bad plugin %s" % args.known_bad)
        else:
            print("%s: flagged as expected" % os.path.basename(args.known_bad))
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
