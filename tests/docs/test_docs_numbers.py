"""Docs that quote a number the build can print (issue 32): the plugin ABI
version (`trainyard --version`), the number of ops the conformance kit
checks and the runs of its per-op tier (`trainyard conform --list`).

A quote of the current value carries a marker, `<!-- ty:KEY -->` (KEY is
abi, ops or runs; the rule is in docs/design-notes.md, "Numbers in the
docs"). The marker covers the rest of its line, or, alone on a line, the
block after it (a paragraph, or a whole fenced code block). Each quote it
covers (`ABI 1.10`, `57 ops`, `769 runs`, `769 of 769 runs`) must equal the
build's value; a marker that covers no quote, an unknown key, or a line
saying "Current version" / "host plugin ABI" without a marker fails too.
Dated records ("1.9 (2026-11-28)", a tryout's "632 of 632 runs pass") are
history and carry no marker. Standard library only."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from unittest_exit import run as run_unittest  # noqa: E402

CFG = None

# A marker in backticks (`<!-- ty:abi -->`) is a mention, not a marker.
MARKER = re.compile(r"(?<!`)<!--\s*ty:([a-z_]+)\s*-->(?!`)")
# What each key covers; every group that matched must equal the value.
QUOTES = {
    "abi": re.compile(r"\bABI\W{0,2} ?(\d+\.\d+)\b"),
    "ops": re.compile(r"\b(\d+) ops\b"),
    "runs": re.compile(r"\b(\d+)(?: of (\d+))? runs\b"),
}
SOURCES = {"abi": "trainyard --version", "ops": "trainyard conform --list",
           "runs": "trainyard conform --list"}
FLOAT_DTYPES = ("f32", "bf16", "f16", "f64")
# Phrases that can only mean the current version: they need a marker.
# In double quotes they are a mention too.
CURRENT_ABI = re.compile(r'(?<!")(?:Current version|host plugin ABI)')


def build_values(trainyard):
    """The true values, from the built binary."""
    out = subprocess.run([trainyard, "--version"], capture_output=True, text=True,
                         check=True).stdout
    abi = re.search(r"^plugin ABI (\d+\.\d+)$", out, re.M)
    if not abi:
        raise AssertionError("`trainyard --version` printed no 'plugin ABI X.Y' line:\n" + out)
    listing = subprocess.run([trainyard, "conform", "--list"], capture_output=True, text=True,
                             check=True).stdout
    ops, runs = set(), 0
    for line in listing.splitlines():
        if line.startswith("Bound classes"):
            break
        # A case row: op, case, dtypes, forward bound, backward bound ("-": none).
        m = re.match(r"^([a-z0-9_]+)\s+(\S+)\s+([a-z0-9,]+)\s+(\S+)\s+(\S+)\s*$", line)
        if not m or m.group(1) == "op":
            continue
        ops.add(m.group(1))
        for dtype in m.group(3).split(","):
            # Only float dtypes have a backward (graph/conform/conform_run.c).
            runs += 1 + (m.group(5) != "-" and dtype in FLOAT_DTYPES)
    if not ops or not runs:
        raise AssertionError("`trainyard conform --list` listed no cases:\n" + listing[:2000])
    return {"abi": abi.group(1), "ops": str(len(ops)), "runs": str(runs)}


def doc_files(root):
    """README.md, docs/**/*.md and every folder's README.md (no build trees)."""
    found = []
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "build")))
        for name in sorted(files):
            if name == "README.md" or (name.endswith(".md") and
                                       (rel == "docs" or rel.startswith("docs" + os.sep))):
                found.append(os.path.join(folder, name))
    return found


def block_after(lines, i):
    """Line numbers (0-based) of the block after line i: a fenced code block
    through its closing fence, else the paragraph up to a blank line."""
    j = i + 1
    if j < len(lines) and lines[j].lstrip().startswith("```"):
        k = j + 1
        while k < len(lines) and not lines[k].lstrip().startswith("```"):
            k += 1
        return range(j, min(k + 1, len(lines)))
    k = j
    while k < len(lines) and lines[k].strip():
        k += 1
    return range(j, k)


def check_text(text, name, values):
    """The problems of one document, as 'name:line: ...' strings."""
    problems = []
    lines = text.split("\n")
    covered = {}  # line index -> keys covering it
    for i, line in enumerate(lines):
        for m in MARKER.finditer(line):
            key = m.group(1)
            if key not in QUOTES:
                problems.append("%s:%d: unknown marker ty:%s (known: %s)"
                                % (name, i + 1, key, ", ".join(sorted(QUOTES))))
                continue
            rest = line[m.end():]
            if MARKER.sub("", line).strip():
                spans = [(i, rest)]
            else:
                spans = [(k, lines[k]) for k in block_after(lines, i)]
            quotes = 0
            for k, span in spans:
                covered.setdefault(k, set()).add(key)
                for q in QUOTES[key].finditer(span):
                    for quoted in (g for g in q.groups() if g is not None):
                        quotes += 1
                        if quoted != values[key]:
                            problems.append(
                                "%s:%d: quotes %s '%s' (marked ty:%s), but the build reports %s "
                                "(%s): write %s" % (name, k + 1, key, quoted, key, values[key],
                                                    SOURCES[key], values[key]))
            if not quotes:
                problems.append("%s:%d: marker ty:%s covers no quote of the %s (it covers the "
                                "rest of its line, or the block after it when alone on a line)"
                                % (name, i + 1, key, key))
    for i, line in enumerate(lines):
        if CURRENT_ABI.search(line) and "abi" not in covered.get(i, set()):
            problems.append("%s:%d: quotes the current ABI version without a <!-- ty:abi --> "
                            "marker, so no check holds it: add one before the number"
                            % (name, i + 1))
    return problems



# The SDK header table of docs/plugin-abi.md (rows naming
# `include/trainyard/...`) against TY_SDK_HEADERS, the list the build
# installs (cmake/TrainyardPlugin.cmake).
SDK_ENTRY = re.compile(r'"([a-z0-9_]+\.h)=[^"]+"')
SDK_ROW_HEADER = re.compile(r"`(?:include/trainyard/)?([a-z0-9_]+\.h)`")


def check_sdk_headers(cmake_text, guide_text):
    block = cmake_text[cmake_text.index("set(TY_SDK_HEADERS"):]
    block = block[:block.index(")")]
    built = set(SDK_ENTRY.findall(block))
    listed = set()
    for line in guide_text.splitlines():
        if line.startswith("| `include/trainyard/"):
            listed.update(SDK_ROW_HEADER.findall(line.split("|")[1]))
    problems = ["docs/plugin-abi.md: the SDK table lacks %s, which TY_SDK_HEADERS installs "
                "(cmake/TrainyardPlugin.cmake)" % h for h in sorted(built - listed)]
    problems += ["docs/plugin-abi.md: the SDK table lists %s, which TY_SDK_HEADERS does not "
                 "install" % h for h in sorted(listed - built)]
    return problems


class DocsNumbersTest(unittest.TestCase):
    def test_docs_quote_what_the_build_reports(self):
        values = build_values(CFG.trainyard)
        problems, markers = [], 0
        for path in doc_files(CFG.source):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            markers += len(MARKER.findall(text))
            problems += check_text(text, os.path.relpath(path, CFG.source), values)
        self.assertEqual(problems, [], "\n" + "\n".join(problems))
        # The guide's "Current version" line at least: a check that finds no
        # marker at all has been defeated, not passed.
        self.assertGreater(markers, 0, "no <!-- ty:KEY --> marker in the docs")

    def test_the_listing_counts_what_a_run_runs(self):
        # The counts come from `conform --list`; a run on the template
        # plugin (the reference kernels, fast) must run exactly that many
        # runs of that many ops, or the listing misleads the docs.
        values = build_values(CFG.trainyard)
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, XDG_CACHE_HOME=cache)  # not ~/.cache
            r = subprocess.run([CFG.trainyard, "conform", "--backend", "template", "--seed", "1",
                                "--json"], capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        results = json.loads(r.stdout)
        self.assertEqual((str(len({x["op"] for x in results})), str(len(results))),
                         (values["ops"], values["runs"]),
                         "(ops, runs) of `conform --backend template` differ from what "
                         "`conform --list` lists")

    def test_a_changed_number_fails(self):
        # The checker itself, on text whose numbers differ from the build's.
        values = {"abi": "1.10", "ops": "57", "runs": "769"}
        good = ("Current version: <!-- ty:abi -->**ABI 1.10**.\n\n"
                "<!-- ty:runs -->\n```\nsummary: 769 runs on cpu\n```\n"
                "All <!-- ty:ops -->57 ops, <!-- ty:runs -->769 of 769 runs pass.\n")
        self.assertEqual(check_text(good, "x.md", values), [])
        stale = good.replace("ABI 1.10", "ABI 1.9").replace("769 runs on", "632 runs on")
        stale = stale.replace("769 of 769", "769 of 770")
        problems = check_text(stale, "x.md", values)
        self.assertEqual(len(problems), 3, problems)
        self.assertIn("x.md:1: quotes abi '1.9' (marked ty:abi), but the build reports 1.10 "
                      "(trainyard --version): write 1.10", problems[0])
        self.assertIn("x.md:5: quotes runs '632'", problems[1])
        self.assertIn("x.md:7: quotes runs '770'", problems[2])
        # Unmarked current-version phrases, dangling and unknown markers.
        problems = check_text("Current version: ABI 1.10\n<!-- ty:ops --> none here\n"
                              "<!-- ty:lines -->3 lines\n", "y.md", values)
        self.assertEqual(len(problems), 3, problems)
        self.assertIn("y.md:2: marker ty:ops covers no quote", problems[0])
        self.assertIn("y.md:3: unknown marker ty:lines", problems[1])
        self.assertIn("y.md:1: quotes the current ABI version without a <!-- ty:abi -->",
                      problems[2])
        # Mentions: a marker in backticks, the phrase in double quotes.
        self.assertEqual(check_text('Write `<!-- ty:abi -->`; a "Current version" line.\n',
                                    "z.md", values), [])

    def test_sdk_header_table_lists_what_is_installed(self):
        with open(os.path.join(CFG.source, "cmake", "TrainyardPlugin.cmake")) as f:
            cmake_text = f.read()
        with open(os.path.join(CFG.source, "docs", "plugin-abi.md"), encoding="utf-8") as f:
            guide_text = f.read()
        self.assertEqual(check_sdk_headers(cmake_text, guide_text), [])

    def test_a_changed_sdk_header_list_fails(self):
        cmake_text = 'set(TY_SDK_HEADERS\n  "a.h=hal/a.h"\n  "b.h=backends/common/b.h")\n'
        guide = "| `include/trainyard/a.h`, `c.h` | what |\n"
        self.assertEqual(check_sdk_headers(cmake_text, guide), [
            "docs/plugin-abi.md: the SDK table lacks b.h, which TY_SDK_HEADERS installs "
            "(cmake/TrainyardPlugin.cmake)",
            "docs/plugin-abi.md: the SDK table lists c.h, which TY_SDK_HEADERS does not install"])

    def test_doc_files_skip_build_trees(self):
        with tempfile.TemporaryDirectory() as root:
            for rel in ("README.md", "docs/a.md", "docs/sub/b.md", "hal/README.md",
                        "hal/notes.md", "build-x/README.md", ".git/README.md"):
                os.makedirs(os.path.dirname(os.path.join(root, rel)) or root, exist_ok=True)
                open(os.path.join(root, rel), "w").close()
            got = sorted(os.path.relpath(p, root) for p in doc_files(root))
            self.assertEqual(got, ["README.md", "docs/a.md", "docs/sub/b.md", "hal/README.md"])


def main():
    global CFG
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--source", required=True)
    CFG, rest = parser.parse_known_args()
    return run_unittest([sys.argv[0]] + rest)


if __name__ == "__main__":
    sys.exit(main())
