#!/usr/bin/env python3
"""Summarises a ctest run for scripts/test.sh: why each skipped test was skipped, and counts.

Usage: ctest_report.py JUNIT_XML [LAST_TEST_LOG]

ctest (run with --output-junit) hides the output of skipped tests, so GTEST_SKIP's message
(and the message of a test skipped by SKIP_RETURN_CODE) never reaches the console. This prints
each skipped test with its reason, grouped by reason, then as its last line the counts:
"P passed, F failed, S skipped". Before that it lists the ten slowest tests with their
times, and their share of the summed test time (where the suite's time goes), and after the
skipped tests the last FAILED_TAIL lines of each failed test's output (ctest printed all of it
when the test ended, far above; a report that keeps only the end of the run, as CI's does,
still says why). Failed counts what ctest counts as failed: failures, timeouts and tests that
could not be run (a missing executable). The output of a test comes from the JUnit report,
else from ctest's LastTest.log (which has every test's output).
"""

import re
import sys
import xml.etree.ElementTree as ET

# ctest marks these "not run" tests as skipped; any other "not run" is a failure.
SKIP_MESSAGES = re.compile(r"^(SKIP_REGULAR_EXPRESSION_MATCHED|SKIP_RETURN_CODE=\d+|Skipped)$")
FAILED_TAIL = 15


def outputs_from_log(path):
    """Test name -> output, from ctest's LastTest.log."""
    outputs = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return outputs
    pattern = re.compile(
        r"^\d+/\d+ Test: (.+?)\n.*?^Output:\n-+\n(.*?)<end of output>", re.M | re.S)
    for match in pattern.finditer(text):
        outputs[match.group(1)] = match.group(2)
    return outputs


def skip_reason(output, fallback):
    """GTEST_SKIP's messages in `output`, else its last line, else `fallback`."""
    lines = output.splitlines()
    reasons = []
    for i, line in enumerate(lines):
        if line.endswith(": Skipped"):
            message = []
            for next_line in lines[i + 1:]:
                if next_line.startswith("[  SKIPPED ]") or next_line.startswith("[       OK ]"):
                    break
                if next_line.strip():
                    message.append(next_line.strip())
            if message:
                reasons.append(" ".join(message))
    if reasons:
        return " / ".join(dict.fromkeys(reasons))
    last = [line.strip() for line in lines if line.strip()]
    return last[-1] if last else fallback


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    try:
        root = ET.parse(sys.argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"test.sh: no usable JUnit report from ctest ({e})")
        print("0 passed, 0 failed, 0 skipped")
        return
    log_outputs = outputs_from_log(sys.argv[2]) if len(sys.argv) > 2 else {}
    passed = 0
    failed = []  # (name, output)
    skipped = {}  # reason -> test names
    times = []  # (seconds, name)
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        times.append((float(case.get("time", 0) or 0), name))
        status = case.get("status", "")
        if status == "run":
            passed += 1
        elif status == "fail":
            failed.append((name, case.findtext("system-out") or log_outputs.get(name, "")))
        elif status == "disabled":
            skipped.setdefault("disabled (ctest DISABLED property)", []).append(name)
        else:
            element = case.find("skipped")
            message = element.get("message", "") if element is not None else ""
            out = case.findtext("system-out") or log_outputs.get(name, "")
            if not SKIP_MESSAGES.match(message):
                failed.append((name, out or message))  # ctest: "Not Run", e.g. no executable
                continue
            skipped.setdefault(skip_reason(out, message), []).append(name)
    total = sum(t for t, _ in times)
    if total > 0:
        slowest = sorted(times, reverse=True)[:10]
        print(f"Slowest tests (of {total:.0f} s summed over {len(times)} tests; ctest runs them "
              f"in parallel):")
        for seconds, name in slowest:
            print(f"  {seconds:7.1f} s  {name}")
        print(f"  the ten: {sum(t for t, _ in slowest) / total:.0%} of the summed time")
    count = sum(len(names) for names in skipped.values())
    if count:
        print(f"Skipped tests ({count}), by reason:")
        for reason, names in skipped.items():
            shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            print(f"  {reason}\n    {len(names)} test{'s' if len(names) > 1 else ''}: {shown}")
    for name, out in failed:
        lines = [line.rstrip()[:300] for line in out.splitlines() if line.strip()]
        print(f"FAILED {name}; the end of its output:")
        for line in lines[-FAILED_TAIL:]:
            print(f"  | {line}")
    print(f"{passed} passed, {len(failed)} failed, {count} skipped")


if __name__ == "__main__":
    main()
