#!/bin/sh
# run_keras_example.sh TROIKARUN PYTHON EXAMPLE: runs examples/keras/keras_mnist_like.py on 2
# ranks for 3 epochs and checks that it finishes with rank 0's summary line and that the
# (rank-averaged) loss fell. Exit 77 (skipped) if PYTHON cannot import tensorflow and keras, or
# if the build has no op library (as run_tf_pytest.sh). With KERAS_BACKEND=torch (Keras' torch
# backend, troika.keras over troika.torch): skipped if PYTHON cannot import torch and keras.
set -eu
troikarun=$1 python=$2 example=$3
if [ "${KERAS_BACKEND:-}" = torch ]; then
  if ! "$python" -c 'import torch, keras' 2>/dev/null; then
    echo "skipped: $python cannot import torch and keras (scripts/setup.sh --test-tools installs them into build/venv-torch2)"
    exit 77
  fi
elif ! "$python" -c 'import tensorflow, keras' 2>/dev/null; then
  echo "skipped: $python cannot import tensorflow and keras (scripts/setup.sh --test-tools)"
  exit 77
elif [ ! -f "${PYTHONPATH%%:*}/troika/tensorflow/_troika_tf_ops.so" ]; then
  echo "skipped: the build has no troika.tensorflow op library (no TensorFlow at configure time)"
  exit 77
fi
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
out=$("$troikarun" -np 2 -- "$python" "$example" --epochs 3 --num-samples 1024 2>&1) || {
  echo "$out"; echo "FAIL: the example exited with an error"; exit 1; }
echo "$out"
line=$(echo "$out" | grep 'keras_mnist_like done: 2 ranks, 3 epochs' || true)
if [ -z "$line" ]; then echo "FAIL: no summary line from rank 0"; exit 1; fi
echo "$line" | awk '{
  for (i = 1; i <= NF; i++) if ($i == "->") { first = $(i - 1); last = $(i + 1) }
  sub(/,$/, "", last)
  if (first == "" || last == "") { print "FAIL: no loss in the summary"; exit 1 }
  if (!(last + 0 < first + 0)) { print "FAIL: the loss did not fall: " first " -> " last; exit 1 }
  print "OK: loss " first " -> " last
}'
