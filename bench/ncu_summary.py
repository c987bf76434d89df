#!/usr/bin/env python3
"""Sums an Nsight Compute CSV (ncu --csv --metrics gpu__time_duration.sum)
by kernel: launches, total and mean device time, and each kernel's share.

  ncu --csv --clock-control none --metrics gpu__time_duration.sum \\
      --launch-skip 3000 --launch-count 1000 PROGRAM ... > prof.csv
  bench/ncu_summary.py prof.csv [--steps N | --step-kernel NAME] [--top 40]

Totals are divided by the engine steps the window held (per-step figures):
--steps, or the launches of --step-kernel (default ty_sample, once a step). Kernel names are shortened to the function name
(template arguments and parameter lists dropped). Times are ncu's
serialized kernel durations: launch gaps and overlap are not in them."""
import argparse
import csv
import re
import sys
from collections import defaultdict


def short(name):
    name = re.sub(r"\(.*$", "", name)  # parameter list
    depth, out = 0, []
    for ch in name:  # template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip() or name


def scale_ns(unit):
    return {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(unit, 1.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--steps", type=float, default=0,
                    help="steps in the window (default: launches of --step-kernel)")
    ap.add_argument("--step-kernel", default="ty_sample",
                    help="a kernel launched once per step (default ty_sample)")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    rows = []
    with open(a.csv, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]  # drop ncu's own ==PROF== lines
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        try:
            v = float(r["Metric Value"].replace(",", "")) * scale_ns(r.get("Metric Unit", ""))
        except ValueError:
            continue
        rows.append((short(r["Kernel Name"]), r.get("Grid Size", ""), r.get("Block Size", ""), v))
    if not rows:
        sys.exit("ncu_summary: no gpu__time_duration.sum rows in " + a.csv)
    by = defaultdict(lambda: [0, 0.0])
    for name, grid, block, v in rows:
        k = (name, grid, block)
        by[k][0] += 1
        by[k][1] += v
    total = sum(v for *_, v in rows)
    if a.steps <= 0:
        a.steps = float(sum(1 for name, *_ in rows if name == a.step_kernel) or 1)
    print(f"{len(rows)} kernels, {total / 1e3:.1f} us in all, {total / 1e3 / a.steps:.1f} us per step"
          f" over {a.steps:g} steps")
    print(f"{'us/step':>9} {'share':>6} {'count':>6} {'mean us':>8}  kernel [grid] [block]")
    for (name, grid, block), (n, t) in sorted(by.items(), key=lambda kv: -kv[1][1])[:a.top]:
        print(f"{t / 1e3 / a.steps:9.1f} {100 * t / total:5.1f}% {n:6d} {t / n / 1e3:8.2f}  "
              f"{name} {grid} {block}")


if __name__ == "__main__":
    main()
