#!/usr/bin/env bash
# Installs what the build and the tests need (scripts/setup.sh --test-tools), builds Troika
# with its tests (-j2), runs the whole test suite with ctest, then the libFuzzer target for
# TROIKA_FUZZ_SECONDS (default 60; scripts/fuzz.sh). Usage: scripts/test.sh [extra ctest arguments]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" --test-tools
cd "$root/build"
ctest --output-on-failure --timeout 900 -j2 "$@"
"$root/scripts/fuzz.sh" "${TROIKA_FUZZ_SECONDS:-60}"
