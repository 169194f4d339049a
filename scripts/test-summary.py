#!/usr/bin/python3
"""Prints one line counting test cases from meson's testlog.json files (the main build's, the fuzz
build's): test-summary.py TESTLOG.json...

Check programs report "NN%: Checks: N, Failures: F, Errors: E"; other tests (a fuzz target's
short run among them) count as one case. A program that failed without such a line counts as one
failure, and so does a log that is missing (its build failed before any test ran). Each failing
program's name and its failed checks' lines are printed just above the count, so that the tail of
a CI log names what failed."""
import json
import re
import sys

passed = failed = skipped = 0
tally = re.compile(r"Checks: (\d+), Failures: (\d+), Errors: (\d+)")
check_failure = re.compile(r"^[^:\s]+:\d+:[FE]:")
culprits = []


def blame(entry):
    """Remembers a failing program and the lines in which its checks said why."""
    out = entry.get("stdout") or ""
    lines = [l for l in out.splitlines() if check_failure.match(l)][:8]
    if not lines:
        lines = out.splitlines()[-4:]
    culprits.append((entry.get("name", "?"), entry.get("result", "?"), lines))


for path in sys.argv[1:]:
    try:
        log = open(path, encoding="utf-8")
    except OSError as e:
        print(f"test-summary: {path}: {e.strerror}: counted as a failure", file=sys.stderr)
        failed += 1
        continue
    with log:
        for line in log:
            try:
                entry = json.loads(line)
            except ValueError:
                # meson writes one JSON object a line; a line it could not finish is a failure
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
                if result not in ("OK", "EXPECTEDFAIL") or f + e:
                    blame(entry)
            elif result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            else:
                failed += 1
                blame(entry)
for name, result, lines in culprits:
    print(f"FAILED {name} ({result})")
    for line in lines:
        print(f"    {line[:300]}")
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
