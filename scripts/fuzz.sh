#!/usr/bin/env bash
# Builds the libFuzzer target (tests/fuzz/negotiation_fuzz.cc) with clang, ASan and UBSan into
# build-fuzz/, and runs it for a bounded time on a corpus kept in build-fuzz/corpus. Exits
# non-zero on any crash, leak or sanitizer report (the reproducer is left in build-fuzz/).
#
# Usage: scripts/fuzz.sh [SECONDS]     (default 60; scripts/test.sh runs it)
#        scripts/fuzz.sh --build-only   (builds it and exits: test.sh builds it beside ctest)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
out="$root/build-fuzz"
cmake -S "$root" -B "$out" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DTROIKA_FUZZ=ON -DTROIKA_BUILD_TESTS=OFF -DTROIKA_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$out" -j2 --target troika-negotiation-fuzz
if [[ "$seconds" == "--build-only" ]]; then exit 0; fi
mkdir -p "$out/corpus"
cd "$out"
echo "fuzz: troika-negotiation-fuzz for ${seconds}s"
./tests/fuzz/troika-negotiation-fuzz -max_total_time="$seconds" -max_len=8192 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 corpus 2>&1 | tail -20
exit "${PIPESTATUS[0]}"
