#!/usr/bin/env python3
"""Runs backend_cli.py's checks on the backend named by --backend (used for
the cpu backend; the device suites have their own files with extra checks)."""
import sys
import unittest

from backend_cli import (ConformTest, ForwardTest, GenerateTest, MixedPrecisionTest,  # noqa: F401
                         TrainTest, parse_common, skip_unless_usable)

if __name__ == "__main__":
    rest = parse_common(sys.argv[1:])
    skip_unless_usable()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
