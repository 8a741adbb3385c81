#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Print the one-line verdict CI reads, 'N passed, N failed, N skipped',
from meson's testlog.json. TAP tests count their individual test cases;
other tests count once. Exits non-zero on any failure or when nothing ran."""
import json
import sys

passed = failed = skipped = 0
with open(sys.argv[1]) as log:
    for line in log:
        test = json.loads(line)
        result = test["result"]
        cases = [l for l in test.get("stdout", "").splitlines()
                 if l.startswith(("ok ", "not ok "))]
        if test.get("protocol") == "tap" or cases:
            for case in cases:
                if case.startswith("not ok") and "# TODO" not in case:
                    failed += 1
                elif "# SKIP" in case or "# skip" in case:
                    skipped += 1
                else:
                    passed += 1
            # a crash or time-out after the last case still fails the run
            if result not in ("OK", "EXPECTEDFAIL", "SKIP") and not any(
                    c.startswith("not ok") for c in cases):
                failed += 1
            continue
        if result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif result == "SKIP":
            skipped += 1
        else:
            failed += 1

print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or not passed else 0)
