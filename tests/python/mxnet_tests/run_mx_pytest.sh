#!/bin/sh
# run_mx_pytest.sh TROIKARUN NP PYTHON TEST_FILE: TEST_FILE under pytest on NP ranks started by
# troikarun, with PYTHON, a Python that has MXNet (build/venv-mxnet: scripts/setup.sh
# --test-tools installs mxnet 1.9.1 there). Exit 77 (skipped) if PYTHON cannot import mxnet and
# pytest. Only this directory's conftest.py applies (--confcutdir): the one above is PyTorch's.
set -eu
troikarun=$1 np=$2 python=$3 file=$4
if ! "$python" -c 'import mxnet, pytest' 2>/dev/null; then
  echo "MXNet tests skipped: $python cannot import mxnet and pytest (scripts/setup.sh --test-tools installs them into build/venv-mxnet)"
  exit 77
fi
# One engine worker and one OpenMP thread per rank: the ranks share the machine's cores.
export MXNET_CPU_WORKER_NTHREADS="${MXNET_CPU_WORKER_NTHREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
dir=$(dirname "$file")
# MXNet 1.9.1 on numpy 1.23 warns of deprecations at import (no:warnings): not the tests' own.
exec "$troikarun" -np "$np" ${TROIKARUN_ARGS:-} -- "$python" -m pytest -x -q -p no:cacheprovider \
  -p no:warnings \
  --confcutdir="$dir" "$file"
