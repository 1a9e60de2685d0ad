#!/usr/bin/env bash
# Installs what the build and the tests need (scripts/setup.sh --test-tools), builds Troika
# with its tests (-j2), runs the whole test suite with ctest -j4 (at most two Python tests at
# once: each takes one of tests/ctest_resources.json's two "python" resources;
# tests/python/CMakeLists.txt), building the libFuzzer target
# beside it at the lowest priority, then the libFuzzer target for TROIKA_FUZZ_SECONDS
# (default 60; scripts/fuzz.sh). Usage: scripts/test.sh [extra ctest arguments]
#
# After ctest it lists the skipped tests with their reasons (ctest hides a skipped test's
# output); it ends with the fuzz run's figures and, as the very last line,
#   summary: P passed, F failed, S skipped
# It exits non-zero when a test or the fuzz run fails (the fuzz target is not run after a
# failed test suite).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" --test-tools
cd "$root/build"
junit="$root/build/ctest-junit.xml"
rm -f "$junit"
# The fuzz target builds beside ctest at the lowest priority, on the CPU time the tests leave
# idle (many wait on processes and timeouts); it runs after ctest, alone.
# (In a session of its own, so that it can be stopped whole when ctest fails.)
setsid nice -n 19 "$root/scripts/fuzz.sh" --build-only >"$root/build/fuzz-build.log" 2>&1 &
fuzz_build=$!
ctest_status=0
ctest --output-on-failure --timeout 900 -j4 --resource-spec-file "$root/tests/ctest_resources.json" \
  --output-junit "$junit" "$@" || ctest_status=$?
if ((ctest_status == 0)); then
  # (A failed build shows again, with its errors, when fuzz.sh runs below.)
  wait "$fuzz_build" || true
else
  kill -- "-$fuzz_build" 2>/dev/null || true
  wait "$fuzz_build" 2>/dev/null || true
fi

report=$(python3 "$root/scripts/ctest_report.py" "$junit" "$root/build/Testing/Temporary/LastTest.log")
counts=$(tail -n 1 <<<"$report")
sed '$d' <<<"$report"

fuzz_status=0
if ((ctest_status == 0)); then
  seconds=${TROIKA_FUZZ_SECONDS:-60}
  fuzz_log="$root/build/fuzz.log"
  "$root/scripts/fuzz.sh" "$seconds" 2>&1 | tee "$fuzz_log" || fuzz_status=$?
  # libFuzzer's last words: "Done 123456 runs in 61 second(s)".
  runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\2 s, \1 runs/p' "$fuzz_log" | tail -n 1)
  if ((fuzz_status == 0)); then
    echo "fuzz: ${runs:-$seconds s}, no crash"
  else
    echo "fuzz: FAILED (exit status $fuzz_status${runs:+ after $runs}): see its output above; the reproducer is in build-fuzz/"
  fi
else
  echo "test.sh: ctest failed (exit status $ctest_status); the fuzz target was not run"
fi
echo "summary: $counts"
if ((ctest_status != 0)); then exit "$ctest_status"; fi
exit "$fuzz_status"
