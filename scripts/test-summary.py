#!/usr/bin/python3
"""Prints one line counting test cases from meson's testlog.json.

Check programs report "NN%: Checks: N, Failures: F, Errors: E"; other tests count as one case.
A program that failed without such a line counts as one failure."""
import json
import re
import sys

passed = failed = skipped = 0
tally = re.compile(r"Checks: (\d+), Failures: (\d+), Errors: (\d+)")
with open(sys.argv[1], encoding="utf-8") as log:
    for line in log:
        try:
            entry = json.loads(line)
        except ValueError:
            # meson writes one JSON object a line; a line it could not finish counts as a failure
            failed += 1
            continue
        result = entry.get("result", "")
        found = tally.findall(entry.get("stdout") or "")
        if result == "SKIP":
            skipped += 1
        elif found:
            n, f, e = (int(x) for x in found[-1])
            passed += n - f - e
            failed += f + e
            if result not in ("OK", "EXPECTEDFAIL") and f + e == 0:
                failed += 1  # the program failed after its tally (a crash, a leak report)
        elif result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        else:
            failed += 1
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
