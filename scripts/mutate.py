#!/usr/bin/env python3
"""Mutation testing for Trainyard: plants each bug of scripts/mutants.json in
a copy of the tree, rebuilds only what the bug's tests need, runs those tests
and reports which bugs no test noticed (the survivors).

Run it through scripts/mutate.sh (see --help). It never edits the tree it is
started from: every mutant is applied to a copy under the work folder.
Standard library only, like the Python tests.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_LIST = os.path.join(ROOT, "scripts", "mutants.json")
FIELDS = ("id", "file", "original", "replacement", "tests", "layer", "kind",
          "description", "explanation")
# The build of the copy uses the CI preset, so the objects it compiles are
# the ones an ordinary `cmake --preset ci-gcc` build made: ccache (whose
# base_dir turns the absolute paths into relative ones) serves most of the
# first build from cache when the copy lies under the same base_dir.
PRESET = "ci-gcc"
BUILD_SUBDIR = "build-ci-gcc"
MIN_MUTANTS = 60


class UsageError(Exception):
    pass


def load_mutants(path):
    """The list, checked for shape: a list of objects with every field a
    non-empty string and unique ids. Raises ValueError naming the entry."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("mutants"), list):
        raise ValueError(f"{path}: expected an object with a 'mutants' list")
    seen = set()
    for i, m in enumerate(data["mutants"]):
        where = f"{path}: mutant #{i + 1}"
        if not isinstance(m, dict):
            raise ValueError(f"{where}: not an object")
        for k in FIELDS:
            v = m.get(k)
            if not isinstance(v, str) or not v.strip():
                raise ValueError(f"{where} ({m.get('id', '?')}): field '{k}' is missing or empty")
        extra = set(m) - set(FIELDS)
        if extra:
            raise ValueError(f"{where} ({m['id']}): unknown field(s) {', '.join(sorted(extra))}")
        if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", m["id"]):
            raise ValueError(f"{where}: id '{m['id']}' must be lower-case letters, digits, '_', '.', '-'")
        if m["id"] in seen:
            raise ValueError(f"{where}: id '{m['id']}' is used twice")
        seen.add(m["id"])
        if m["original"] == m["replacement"]:
            raise ValueError(f"{where} ({m['id']}): replacement equals the original")
        try:
            re.compile(m["tests"])
        except re.error as e:
            raise ValueError(f"{where} ({m['id']}): tests regex '{m['tests']}': {e}")
    return data["mutants"]


def check_anchors(mutants, root):
    """Problems (strings) with the anchors in the tree at `root`: every
    original text must occur exactly once in its file."""
    problems = []
    for m in mutants:
        path = os.path.join(root, m["file"])
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            problems.append(f"{m['id']}: cannot read {m['file']}: {e.strerror}")
            continue
        n = text.count(m["original"])
        if n != 1:
            problems.append(f"{m['id']}: the original text occurs {n} times in {m['file']} "
                            f"(must be exactly once; update the anchor in scripts/mutants.json): "
                            f"{m['original']!r}")
    return problems


def run(cmd, cwd=None, timeout=None, log=None, env=None):
    """Runs cmd; returns (exit code or None on timeout, seconds)."""
    start = time.monotonic()
    out = log if log is not None else subprocess.DEVNULL
    try:
        p = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
    except OSError as e:
        raise SystemExit(f"mutate: cannot run {cmd[0]}: {e.strerror}")
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        # The whole process group: ctest's children (trainyard, mpirun) too.
        try:
            os.killpg(p.pid, 9)
        except ProcessLookupError:
            pass
        p.wait()
        rc = None
    return rc, time.monotonic() - start


def copy_tree(src, dst):
    """Copies the files git knows (tracked, and untracked that are not
    ignored) from src to dst, so uncommitted work is tested too."""
    files = subprocess.run(["git", "-C", src, "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], check=True, capture_output=True).stdout
    for rel in files.decode().split("\0"):
        if not rel:
            continue
        s = os.path.join(src, rel)
        if not os.path.lexists(s):
            continue  # deleted but not yet committed
        d = os.path.join(dst, rel)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        if os.path.islink(s):
            os.symlink(os.readlink(s), d)
        elif os.path.isfile(s):
            shutil.copy2(s, d)


class Build:
    def __init__(self, tree, jobs, log):
        self.tree = tree
        self.dir = os.path.join(tree, BUILD_SUBDIR)
        self.jobs = jobs
        self.log = log
        self.targets = None
        self.tests = None

    def configure(self):
        cmd = ["cmake", "--preset", PRESET]
        if shutil.which("ccache"):
            cmd += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        rc, _ = run(cmd, cwd=self.tree, log=self.log)
        if rc != 0:
            raise SystemExit(f"mutate: cmake --preset {PRESET} failed in the copy; see {self.log.name}")
        out = subprocess.run(["ninja", "-C", self.dir, "-t", "targets", "all"], check=True,
                             capture_output=True, text=True).stdout
        self.targets = sorted({line.split(":")[0] for line in out.splitlines() if ":" in line})
        out = subprocess.run(["ctest", "--show-only=json-v1"], cwd=self.dir, check=True,
                             capture_output=True, text=True).stdout
        self.tests = json.loads(out)["tests"]

    def selected(self, regex):
        """Names of the tests `ctest -R regex` runs (ctest's own matching)."""
        out = subprocess.run(["ctest", "-N", "-R", regex, "--show-only=json-v1"], cwd=self.dir,
                             check=True, capture_output=True, text=True).stdout
        return [t["name"] for t in json.loads(out)["tests"]]

    def test_lines(self):
        """{test name: the text of its add_test and set_tests_properties
        lines} from the CTestTestfile.cmake files. ctest's own JSON leaves
        out the command of a test whose executable is not built yet, so the
        files are read instead."""
        lines = {}
        for folder, _, files in os.walk(self.dir):
            if "CTestTestfile.cmake" not in files:
                continue
            with open(os.path.join(folder, "CTestTestfile.cmake"), encoding="utf-8") as f:
                for line in f:
                    m = re.match(r"\s*(?:add_test|set_tests_properties)\((?:\[=\[(.*?)\]=\]|(\S+))", line)
                    if m:
                        name = m.group(1) or m.group(2)
                        lines[name] = lines.get(name, "") + line
        return lines

    def targets_for(self, names):
        """The build outputs those tests use: every build-folder path named
        in their command lines and environments (a folder stands for the
        executables and plugins under it), and the in-tree plugins every
        test may load."""
        if not hasattr(self, "_lines"):
            self._lines = self.test_lines()
        prefix = self.dir + "/"
        known = set(self.targets)
        want = {t for t in self.targets if t.startswith("lib/trainyard/") and t.endswith(".so")}
        for name in names:
            text = self._lines.get(name, "")
            for path in re.findall(re.escape(prefix) + r"[^\s:=,;\"']*", text):
                rel = path[len(prefix):].rstrip("/")
                if rel in known:
                    want.add(rel)
                else:
                    want.update(x for x in self.targets if x.startswith(rel + "/")
                                and (x.endswith(".so") or "." not in os.path.basename(x)))
        # Only outputs ninja links or copies (no object files, no phony dirs).
        return sorted(x for x in want if not x.endswith((".o", ".a")) and "/CMakeFiles/" not in x)

    def build(self, targets, timeout=None):
        return run(["ninja", "-C", self.dir, "-j", str(self.jobs)] + targets, timeout=timeout,
                   log=self.log)

    def test(self, regex, per_test_timeout, timeout, stop_on_failure=True):
        """Runs the tests; returns (exit code or None, seconds, names of the
        tests ctest reported as skipped: a skip passes, so a mutant whose
        tests all skipped was never tested)."""
        cmd = ["ctest", "-R", regex, "--timeout", str(per_test_timeout), "-j", str(self.jobs),
               "--output-on-failure"]
        if stop_on_failure:
            cmd.append("--stop-on-failure")
        self.log.flush()
        start = self.log.tell()
        rc, secs = run(cmd, cwd=self.dir, timeout=timeout, log=self.log)
        self.log.flush()
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            f.seek(start)
            out = f.read()
        skipped = re.findall(r"Test\s+#\d+:\s+(\S+)\s+\.*\s*\*+Skipped", out)
        return rc, secs, skipped


def machine():
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} logical CPUs, {model}, {platform.system()} {platform.release()}"


def git_commit(root):
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short=12", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               check=True, capture_output=True, text=True).stdout.strip()
        return head + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def md_cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def write_report(path, results, meta, mutants_by_id):
    counted = [r for r in results if r["result"] != "build-failed"]
    survived = [r for r in counted if r["result"] == "survived"]
    killed = [r for r in counted if r["result"] == "killed"]
    timed = [r for r in counted if r["result"] == "timed-out"]
    stillborn = [r for r in results if r["result"] == "build-failed"]
    pct = 100.0 * len(survived) / len(counted) if counted else 0.0
    lines = [
        "# Mutation testing report",
        "",
        "Written by `scripts/mutate.sh` (mutants in `scripts/mutants.json`). Each mutant is one",
        "planted bug, applied to a copy of the tree, built incrementally and run against the",
        "ctest entries that should catch it. Regenerate with `scripts/mutate.sh`.",
        "",
        f"- Date: {meta['date']}",
        f"- Machine: {meta['machine']}",
        f"- Commit: {meta['commit']}",
        f"- Command: `{meta['command']}`",
        f"- Wall time: {meta['wall']:.0f} s (copy + baseline build and tests {meta['baseline']:.0f} s)",
        f"- Per-mutant limit: {meta['limit']} s for the tests",
        "",
        "## Totals",
        "",
        f"| mutants | killed | timed out (killed) | survived | build failed (stillborn, not counted) | survival |",
        f"|---|---|---|---|---|---|",
        f"| {len(results)} | {len(killed)} | {len(timed)} | {len(survived)} | {len(stillborn)} "
        f"| {pct:.1f}% of {len(counted)} |",
        "",
        f"Goal: at most {meta['max_survival']:g}% survivors: "
        + ("**met**." if pct <= meta["max_survival"] else "**not met**."),
        "",
        "## Survivors",
        "",
    ]
    if survived:
        for r in survived:
            m = mutants_by_id[r["id"]]
            lines.append(f"- `{r['id']}` ({m['file']}, {m['kind']}): {m['description']}  ")
            lines.append(f"  Why: {m['explanation']}")
            if r["skipped"]:
                lines.append(f"  (ctest skipped {', '.join(r['skipped'])} in this run)")
    else:
        lines.append("None.")
    if stillborn:
        lines += ["", "## Stillborn (did not build)", ""]
        for r in stillborn:
            lines.append(f"- `{r['id']}` ({mutants_by_id[r['id']]['file']})")
    lines += ["", "## Every mutant", "",
              "| id | layer | kind | file | tests (ctest -R) | result | build s | test s |",
              "|---|---|---|---|---|---|---|---|"]
    for r in results:
        m = mutants_by_id[r["id"]]
        lines.append(f"| `{r['id']}` | {m['layer']} | {m['kind']} | {md_cell(m['file'])} "
                     f"| `{md_cell(m['tests'])}` | {r['result']} | {r['build_s']:.0f} "
                     f"| {r['test_s']:.0f} |")
    lines.append("")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return pct


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="scripts/mutate.sh",
        description="Mutation testing: plant each bug of the mutant list in a copy of the tree, "
                    "rebuild incrementally, run the tests that should catch it, report survivors.",
        epilog="Exit status: 0 when survivors are at most --max-survival percent of the mutants "
               "that built, 1 otherwise (or when the baseline fails), 2 on a usage error.")
    p.add_argument("--only", metavar="ID[,ID]", help="run only these mutants")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="parallel build and test jobs [nproc]")
    p.add_argument("--list", action="store_true", help="print the mutants and exit")
    p.add_argument("--check", action="store_true",
                   help="check the mutant list (fields, unique ids, anchors) and exit; no build")
    p.add_argument("--report", metavar="PATH", default=os.path.join(ROOT, "docs", "mutation-report.md"),
                   help="where to write the Markdown report [docs/mutation-report.md]")
    p.add_argument("--keep", action="store_true", help="keep the copy of the tree (and its build)")
    p.add_argument("--workdir", metavar="DIR",
                   help="folder in which the copy is made [a new folder beside the tree, "
                        "so ccache's base_dir covers it]")
    p.add_argument("--mutants", metavar="FILE", default=DEFAULT_LIST, help="the mutant list")
    p.add_argument("--timeout", type=int, default=300, metavar="S",
                   help="time limit of one mutant's test run; past it the mutant counts as "
                        "killed (timed out) [300]")
    p.add_argument("--max-survival", type=float, default=5.0, metavar="PCT",
                   help="the survival percentage above which the exit status is 1 [5]")
    p.add_argument("--source", metavar="DIR", default=ROOT,
                   help="the tree to copy and mutate [this checkout]")
    try:
        a = p.parse_args(argv)
    except SystemExit as e:
        raise UsageError() if e.code else e
    if a.jobs < 1:
        p.print_usage(sys.stderr)
        raise UsageError("--jobs must be at least 1")
    if a.timeout < 1:
        p.print_usage(sys.stderr)
        raise UsageError("--timeout must be at least 1 second")
    return a


def main(argv):
    a = parse_args(argv)
    try:
        mutants = load_mutants(a.mutants)
    except (OSError, ValueError) as e:
        print(f"mutate: {e}", file=sys.stderr)
        return 1
    if a.check:
        problems = check_anchors(mutants, a.source)
        if len(mutants) < MIN_MUTANTS:
            problems.append(f"{a.mutants}: {len(mutants)} mutants; the list must keep at least {MIN_MUTANTS}")
        layers = sorted({m["layer"] for m in mutants})
        for p in problems:
            print(f"mutate --check: {p}", file=sys.stderr)
        if problems:
            return 1
        print(f"mutate --check: {len(mutants)} mutants, ids unique, every anchor found once "
              f"(layers: {', '.join(layers)})")
        return 0
    if a.only:
        want = [x for x in a.only.split(",") if x]
        unknown = [x for x in want if x not in {m["id"] for m in mutants}]
        if unknown:
            raise UsageError(f"--only: no mutant named {', '.join(unknown)} (see --list)")
        mutants = [m for m in mutants if m["id"] in want]
    if a.list:
        for m in mutants:
            print(f"{m['id']:32} {m['layer']:10} {m['file']:44} {m['tests']}")
        print(f"{len(mutants)} mutants")
        return 0
    problems = check_anchors(mutants, a.source)
    if problems:
        for p in problems:
            print(f"mutate: {p}", file=sys.stderr)
        return 1
    for tool in ("git", "cmake", "ninja", "ctest"):
        if not shutil.which(tool):
            print(f"mutate: '{tool}' is not on PATH; install it (scripts/install-deps.sh)", file=sys.stderr)
            return 1

    started = time.monotonic()
    parent = a.workdir or os.path.dirname(os.path.abspath(a.source))
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".ty-mutate.", dir=parent)
    tree = os.path.join(work, "tree")
    log_path = os.path.join(work, "mutate.log")
    log = open(log_path, "w")
    by_id = {m["id"]: m for m in mutants}
    results = []
    try:
        print(f"mutate: copying {a.source} to {tree}", flush=True)
        copy_tree(a.source, tree)
        b = Build(tree, a.jobs, log)
        print(f"mutate: configuring (cmake --preset {PRESET}); log: {log_path}", flush=True)
        b.configure()
        plans = {}
        all_targets, all_tests = set(), set()
        for m in mutants:
            names = b.selected(m["tests"])
            if not names:
                print(f"mutate: {m['id']}: no ctest entry matches '{m['tests']}' "
                      f"(fix its 'tests' field)", file=sys.stderr)
                return 1
            plans[m["id"]] = (names, b.targets_for(set(names)))
            all_targets.update(plans[m["id"]][1])
            all_tests.update(names)
        print(f"mutate: baseline build of {len(all_targets)} targets", flush=True)
        rc, secs = b.build(sorted(all_targets))
        if rc != 0:
            print(f"mutate: the unmutated copy does not build; see {log_path}", file=sys.stderr)
            return 1
        print(f"mutate: built in {secs:.0f} s; baseline run of {len(all_tests)} test entries", flush=True)
        regex = "^(" + "|".join(re.escape(n) for n in sorted(all_tests)) + ")$"
        rc, secs, skipped = b.test(regex, a.timeout, None, stop_on_failure=False)
        if skipped:
            print(f"mutate: warning: the baseline skips {', '.join(skipped)}; mutants that only "
                  f"these tests cover count as survivors", file=sys.stderr, flush=True)
        if rc != 0:
            failed = []
            lf = os.path.join(b.dir, "Testing", "Temporary", "LastTestsFailed.log")
            if os.path.exists(lf):
                with open(lf) as f:
                    failed = [line.strip().split(":", 1)[-1] for line in f if line.strip()]
            print(f"mutate: the unmutated tree fails {', '.join(failed) or 'its tests'}; "
                  f"fix those first (log: {log_path})", file=sys.stderr)
            return 1
        baseline = time.monotonic() - started
        print(f"mutate: baseline passes ({secs:.0f} s of tests); {len(mutants)} mutants", flush=True)
        for i, m in enumerate(mutants, 1):
            names, targets = plans[m["id"]]
            path = os.path.join(tree, m["file"])
            with open(path, encoding="utf-8") as f:
                text = f.read()
            log.write(f"\n===== {m['id']}: {m['file']} =====\n")
            log.flush()
            try:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text.replace(m["original"], m["replacement"], 1))
                rc, build_s = b.build(targets)
                test_s, skipped = 0.0, []
                if rc != 0:
                    result = "build-failed"
                else:
                    rc, test_s, skipped = b.test(m["tests"], a.timeout, a.timeout + 30)
                    result = "timed-out" if rc is None else "survived" if rc == 0 else "killed"
                    # ctest reports a per-test timeout as a failure; name it.
                    if rc not in (None, 0) and test_s >= a.timeout:
                        result = "timed-out"
            finally:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            results.append({"id": m["id"], "result": result, "build_s": build_s, "test_s": test_s,
                            "skipped": skipped})
            print(f"mutate: [{i}/{len(mutants)}] {m['id']}: {result} "
                  f"(build {build_s:.0f} s, tests {test_s:.0f} s)", flush=True)
        meta = {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(),
            "commit": git_commit(a.source),
            "command": " ".join(["scripts/mutate.sh"] + argv),
            "wall": time.monotonic() - started,
            "baseline": baseline,
            "limit": a.timeout,
            "max_survival": a.max_survival,
        }
        pct = write_report(a.report, results, meta, by_id)
        survivors = [r["id"] for r in results if r["result"] == "survived"]
        print(f"mutate: {len(results)} mutants, survivors: {', '.join(survivors) or 'none'} "
              f"({pct:.1f}%); report: {a.report}; {meta['wall']:.0f} s", flush=True)
        return 0 if pct <= a.max_survival else 1
    finally:
        log.close()
        if a.keep:
            print(f"mutate: kept {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as e:
        if e.args:
            print(f"mutate: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("mutate: interrupted", file=sys.stderr)
        sys.exit(130)
