#!/usr/bin/env python3
"""Runs a test program as N ranks of a launch without MPI (issue 36) for
ctest: plain processes with torchrun's variables and a job token, meeting
on 127.0.0.1 (tests/common/env_launch.py). Prints every rank's output;
exits 0 when every rank did, else 1.

usage: run_env.py N PROGRAM [ARGS...]"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import env_launch  # noqa: E402


def main():
    n, argv = int(sys.argv[1]), sys.argv[2:]
    ranks = env_launch.launch(argv, n, timeout=240)
    for r in ranks:
        print("--- rank %d: exit %s after %.1f s" % (r.rank, r.returncode, r.seconds))
        sys.stdout.write(r.stdout)
        sys.stdout.write(r.stderr)
    return 0 if all(r.returncode == 0 for r in ranks) else 1


if __name__ == "__main__":
    sys.exit(main())
