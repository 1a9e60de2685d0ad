#!/usr/bin/env bash
# Installs every Debian package the build needs (idempotent), then configures and builds
# Troika with -j2 into ./build.  Usage: scripts/setup.sh [--no-build]
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git iproute2
  python3  # tests: checks that written timelines are valid JSON
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev libgloo-dev
  prometheus-cpp-dev civetweb libcivetweb-dev libssl-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
fi

[[ "${1:-}" == "--no-build" ]] && exit 0

root=$(cd "$(dirname "$0")/.." && pwd)
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE="${TROIKA_BUILD_TYPE:-RelWithDebInfo}"
cmake --build "$root/build" -j2
