#!/bin/sh
# run_unit_tests.sh PYTHON FILE [torch]: FILE (tests/python/unit/) under pytest in this one
# process, without a job or troikarun: unit tests of the Python layer's modules. No conftest.py
# is loaded (tests/python/conftest.py joins a job). Exit 77 (skipped) if PYTHON lacks pytest, or
# torch when the third argument is "torch".
set -eu
python=$1 file=$2 needs=${3:-}
modules=pytest
[ "$needs" = torch ] && modules="pytest, torch"
if ! "$python" -c "import $modules" 2>/dev/null; then
  echo "Python unit tests skipped: $python cannot import $modules (Debian: python3-pytest python3-torch)"
  exit 77
fi
exec "$python" -m pytest -q -p no:cacheprovider --noconftest "$file"
