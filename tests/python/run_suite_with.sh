#!/bin/sh
# run_suite_with.sh PYTHON [BUILD_DIR]: the Python test files (the ones ctest runs) under
# another interpreter — e.g. a virtual environment with another torch — against the module in
# BUILD_DIR (default: build) built for a compatible Python (same version). Prints one line
# per file and rank count; exits non-zero if any failed.
#   python3 -m venv /tmp/torch2 && /tmp/torch2/bin/pip install torch pytest
#   tests/python/run_suite_with.sh /tmp/torch2/bin/python
set -u
python=$1 build=${2:-build}
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$build/python" PYTHONDONTWRITEBYTECODE=1
"$python" -c 'import torch; print("torch", torch.__version__)' || exit 1
status=0
for spec in "2 test_module.py" "2 test_collectives.py" "3 test_collectives.py" \
            "4 test_collectives.py" "3 test_process_sets.py" "2 test_errors.py" \
            "3 test_errors.py" "2 test_helpers.py" "2 test_optimizer.py" "4 test_optimizer.py" \
            "2 test_autograd.py" "3 test_autograd.py" "2 test_grouped.py" "3 test_grouped.py" \
            "2 test_sync_batch_norm.py" "3 test_sync_batch_norm.py" "2 test_basics.py"; do
  set -- $spec
  out=$(TROIKA_TEST_GPU_PLANE_BUILT=$(grep -q "GPU_PLANE_BUILT = True" "$build/python/troika/_build_info.py" && echo ON || echo OFF) \
        "$here/run_pytest.sh" "$build/agent/troikarun" "$1" "$python" "$here/$2" 2>&1)
  rc=$?
  echo "$2 on $1 ranks: exit $rc: $(echo "$out" | grep -E '^\[0\] [0-9]+ (passed|failed)' | head -n 1)"
  if [ "$rc" -ne 0 ]; then
    echo "$out" | tail -n 30
    status=1
  fi
done
exit $status
