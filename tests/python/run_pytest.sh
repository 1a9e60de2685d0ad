#!/bin/sh
# run_pytest.sh TROIKARUN NP PYTHON TEST_FILE: runs TEST_FILE under pytest on NP ranks started by
# troikarun (each rank runs pytest; they share the job). Exit 77 (skipped) if PYTHON lacks torch
# or pytest. pytest's own status passes through troikarun: a failing rank fails the job, and
# "no tests collected" (5) is a failure too. With TROIKA_PYTEST_NEEDS_CUDA=1: exit 77 if torch
# sees no CUDA device. TROIKARUN_ARGS: more troikarun options (e.g. "--schedules off").
set -eu
troikarun=$1 np=$2 python=$3 file=$4
if ! "$python" -c 'import torch, pytest' 2>/dev/null; then
  echo "Python tests skipped: $python cannot import torch and pytest (Debian: python3-torch python3-pytest; scripts/setup.sh --test-tools)"
  exit 77
fi
if [ "${TROIKA_PYTEST_NEEDS_CUDA:-0}" = 1 ] && ! "$python" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  echo "Python GPU tests skipped: $python's torch sees no CUDA device"
  exit 77
fi
# shellcheck disable=SC2086  # TROIKARUN_ARGS is split into options on purpose
exec "$troikarun" -np "$np" ${TROIKARUN_ARGS:-} -- "$python" -m pytest -x -q -p no:cacheprovider "$file"
