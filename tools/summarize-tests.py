#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Print the one-line verdict CI reads, 'N passed, N failed, N skipped',
from one or more meson testlog.json files (with several, a line per file
first; the total is always the last line); a missing file counts as a
failure. TAP tests count their individual test cases, other tests count
once. Exits non-zero on any failure or when nothing ran."""
import json
import sys


def count(test):
    """(passed, failed, skipped) of one meson test record."""
    result = test["result"]
    cases = [line for line in test.get("stdout", "").splitlines()
             if line.startswith(("ok ", "not ok "))]
    if test.get("protocol") != "tap" and not cases:
        if result in ("OK", "EXPECTEDFAIL"):
            return 1, 0, 0
        return (0, 0, 1) if result == "SKIP" else (0, 1, 0)

    passed = failed = skipped = 0
    for case in cases:
        if case.startswith("not ok") and "# TODO" not in case:
            failed += 1
        elif "# SKIP" in case or "# skip" in case:
            skipped += 1
        else:
            passed += 1
    # a crash or time-out after the last case still fails the run
    if result not in ("OK", "EXPECTEDFAIL", "SKIP") and failed == 0:
        failed += 1
    return passed, failed, skipped


totals = [0, 0, 0]
for path in sys.argv[1:]:
    try:
        with open(path) as log:
            records = [json.loads(line) for line in log]
    except OSError as e:
        print(f"{path}: {e.strerror}", file=sys.stderr)
        totals[1] += 1
        continue
    run = [0, 0, 0]
    for record in records:
        run = [r + c for r, c in zip(run, count(record))]
    totals = [t + r for t, r in zip(totals, run)]
    if len(sys.argv) > 2:
        print(f"{path}: {run[0]} passed, {run[1]} failed, {run[2]} skipped")

passed, failed, skipped = totals
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or not passed else 0)
