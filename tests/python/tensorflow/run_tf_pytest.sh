#!/bin/sh
# run_tf_pytest.sh TROIKARUN NP PYTHON TEST_FILE: TEST_FILE under pytest on NP ranks started by
# troikarun, with PYTHON, a Python that has TensorFlow (build/venv: scripts/setup.sh
# --test-tools installs tensorflow-cpu there). Exit 77 (skipped) if PYTHON cannot import
# tensorflow and pytest, or if the build has no op library (troika/tensorflow/_troika_tf_ops.so
# under PYTHONPATH). Only this directory's conftest.py applies (--confcutdir): the one above is
# PyTorch's. TROIKARUN_ARGS: more troikarun options. With KERAS_BACKEND=torch (troika.keras on
# Keras' torch backend, over troika.torch), PYTHON needs torch, keras and pytest instead
# (build/venv-torch2), and no op library.
set -eu
troikarun=$1 np=$2 python=$3 file=$4
if [ "${KERAS_BACKEND:-}" = torch ]; then
  if ! "$python" -c 'import torch, keras, pytest' 2>/dev/null; then
    echo "Keras torch-backend tests skipped: $python cannot import torch, keras and pytest (scripts/setup.sh --test-tools installs them into build/venv-torch2)"
    exit 77
  fi
elif ! "$python" -c 'import tensorflow, pytest' 2>/dev/null; then
  echo "TensorFlow tests skipped: $python cannot import tensorflow and pytest (scripts/setup.sh --test-tools installs them into build/venv)"
  exit 77
elif [ ! -f "${PYTHONPATH%%:*}/troika/tensorflow/_troika_tf_ops.so" ]; then
  echo "TensorFlow tests skipped: the build has no troika.tensorflow op library (no TensorFlow at configure time)"
  exit 77
fi
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
dir=$(dirname "$file")
# shellcheck disable=SC2086  # TROIKARUN_ARGS is split into options on purpose
exec "$troikarun" -np "$np" ${TROIKARUN_ARGS:-} -- "$python" -m pytest -x -q -p no:cacheprovider \
  --confcutdir="$dir" "$file"
