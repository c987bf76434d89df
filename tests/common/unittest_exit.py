"""What a Python test script tells ctest: 0 when every test ran and passed,
1 when one failed (or none ran: a misspelt suite name must not pass), and
77 when none failed but at least one skipped, which the ctest entry's
SKIP_RETURN_CODE 77 reports as skipped, so that a green run cannot hide a
skip. Each skip is printed on stderr as `SKIPPED: <test id>: <reason>`.
(tests/check_skip_codes.py holds every entry that runs a script to
SKIP_RETURN_CODE 77.) Standard library only."""
import sys
import unittest


def exit_code(result):
    """The exit code of a unittest result (see above)."""
    for test, reason in result.skipped:
        print("SKIPPED: %s: %s" % (test.id(), reason), file=sys.stderr)
    if not result.wasSuccessful():
        return 1
    if result.skipped:
        return 77
    if result.testsRun == 0:
        print("FAILED: no test ran", file=sys.stderr)
        return 1
    return 0


def run(argv, **options):
    """unittest.main over argv (argv[0], options, suites) without exiting;
    its exit code."""
    options.setdefault("verbosity", 2)
    return exit_code(unittest.main(argv=argv, exit=False, **options).result)
