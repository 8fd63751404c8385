"""Runs the Python client's tests (unittest discovery in this folder) and
closes with one line of totals, "N passed, N failed, N skipped", like
tests/run.sh.  Exit status 1 if any test failed or errored.

    KSPEC_BUILD=$PWD/build /usr/bin/python3 tests/python/run.py [-q]
"""

import os
import sys
import unittest


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    suite = unittest.TestLoader().discover(start_dir=here,
                                           top_level_dir=here)
    verbosity = 1 if "-q" in argv else 2
    result = unittest.TextTestRunner(verbosity=verbosity,
                                     stream=sys.stdout).run(suite)
    # A test with failing subtests counts once; an error in setUpClass
    # (no test of the class ran) counts as one failure.
    ran, holders = set(), set()
    for t, _ in result.failures + result.errors:
        case = getattr(t, "test_case", t)
        (ran if isinstance(case, unittest.TestCase) else holders).add(
            case.id())
    unexpected = len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    failed = len(ran) + len(holders) + unexpected
    passed = max(result.testsRun - skipped - len(ran) - unexpected, 0)
    print("python: %d passed, %d failed, %d skipped"
          % (passed, failed, skipped))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
