#!/usr/bin/env python3
"""Runs a test program under `mpirun -np N` (Open MPI, as root in CI) for
ctest: exit 77 (skipped, saying why) without mpirun or the MPI shim, else
the program's own status.

usage: run_mpi.py N SHIM PROGRAM [ARGS...]"""
import os
import shutil
import subprocess
import sys


def main():
    n, shim, program, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    if not shutil.which("mpirun"):
        print("SKIPPED: no mpirun on PATH (scripts/install-deps.sh installs openmpi-bin)")
        return 77
    if not os.path.exists(shim):
        print(f"SKIPPED: {shim} was not built (this build has no MPI)")
        return 77
    env = dict(os.environ)
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    # As tests/apps/test_distributed_cli.py: LeakSanitizer cannot tell Open
    # MPI's leftovers from ours inside a rank.
    if "ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] = env["ASAN_OPTIONS"].replace("detect_leaks=1", "detect_leaks=0")
        if "detect_leaks" not in env["ASAN_OPTIONS"]:
            env["ASAN_OPTIONS"] += ":detect_leaks=0"
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", n,
           program] + args
    r = subprocess.run(cmd, env=env, timeout=300)
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
