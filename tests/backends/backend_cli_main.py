#!/usr/bin/env python3
"""Runs backend_cli.py's checks on the backend named by --backend (used for
the cpu backend; the device suites have their own files with extra checks)."""
import os
import sys
import unittest

from backend_cli import (ConformTest, ForwardTest, GenerateTest, MixedPrecisionTest,  # noqa: F401
                         TrainTest, parse_common, skip_unless_usable)

# 0, 1 or 77 (skipped) for ctest (tests/common/unittest_exit.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import unittest_exit  # noqa: E402

if __name__ == "__main__":
    rest = parse_common(sys.argv[1:])
    skip_unless_usable()
    sys.exit(unittest_exit.run([sys.argv[0]] + rest))
