#!/usr/bin/env bash
# Installs what the build and the tests need (scripts/setup.sh --test-tools), builds Troika
# with its tests (-j2) and runs the whole test suite with ctest. Usage: scripts/test.sh [extra ctest arguments]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" --test-tools
cd "$root/build"
ctest --output-on-failure --timeout 900 -j2 "$@"
