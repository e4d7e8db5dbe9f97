#!/usr/bin/env python3
"""Summary of test results from JUnit XML files (ctest --output-junit,
pytest --junitxml), as the last lines of `make test`:

    failed: C test_x                      (one line per failed test, if any)
    C: 11 passed, 0 failed, 0 skipped; Python: 120 passed, 0 failed, 3 skipped
    131 passed, 0 failed, 3 skipped

    scripts/test_summary.py LABEL=results.xml [LABEL=results.xml ...]

A label may repeat (its counts add up). A missing or unreadable file counts
as one failure of that label. Exits 1 when anything failed, else 0.
"""
import sys
import xml.etree.ElementTree as ET


def count(path):
    """(passed, failed, skipped, names of failed tests) of one JUnit file."""
    root = ET.parse(path).getroot()
    passed = failed = skipped = 0
    failed_names = []
    for case in root.iter("testcase"):
        status = case.get("status", "")  # ctest: run, fail, notrun, disabled
        if case.find("failure") is not None or case.find("error") is not None or status == "fail":
            failed += 1
            name = case.get("name", "?")
            cls = case.get("classname")
            failed_names.append(f"{cls}::{name}" if cls and cls != name else name)
        elif case.find("skipped") is not None or status in ("notrun", "disabled"):
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped, failed_names


def main(argv):
    if not argv or any("=" not in a for a in argv):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    totals = {}  # label -> [passed, failed, skipped]
    failures = []
    for arg in argv:
        label, path = arg.split("=", 1)
        t = totals.setdefault(label, [0, 0, 0])
        try:
            p, f, s, names = count(path)
        except (OSError, ET.ParseError) as e:
            t[1] += 1
            failures.append(f"{label}: no results ({path}: {getattr(e, 'strerror', None) or e})")
            continue
        t[0] += p
        t[1] += f
        t[2] += s
        failures += [f"{label} {n}" for n in names]
    for line in failures:
        print(f"failed: {line}")
    print("; ".join(f"{label}: {p} passed, {f} failed, {s} skipped"
                    for label, (p, f, s) in totals.items()))
    p, f, s = (sum(t[i] for t in totals.values()) for i in range(3))
    print(f"{p} passed, {f} failed, {s} skipped")
    return 1 if f else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
