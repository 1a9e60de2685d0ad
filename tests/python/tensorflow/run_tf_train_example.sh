#!/bin/sh
# run_tf_train_example.sh TROIKARUN PYTHON EXAMPLE: runs
# examples/tensorflow2/tensorflow2_mnist_like.py on 2 ranks for 3 epochs and checks that it
# finishes with rank 0's summary line, that the (rank-averaged) loss fell and that every rank
# ended with the same weights. Exit 77 (skipped) if PYTHON cannot import tensorflow and keras,
# or if the build has no op library (as run_tf_pytest.sh).
set -eu
troikarun=$1 python=$2 example=$3
if ! "$python" -c 'import tensorflow, keras' 2>/dev/null; then
  echo "skipped: $python cannot import tensorflow and keras (scripts/setup.sh --test-tools)"
  exit 77
fi
if [ ! -f "${PYTHONPATH%%:*}/troika/tensorflow/_troika_tf_ops.so" ]; then
  echo "skipped: the build has no troika.tensorflow op library (no TensorFlow at configure time)"
  exit 77
fi
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
out=$("$troikarun" -np 2 -- "$python" "$example" --epochs 3 --num-samples 1024 2>&1) || {
  echo "$out"; echo "FAIL: the example exited with an error"; exit 1; }
echo "$out"
line=$(echo "$out" | grep 'tensorflow2_mnist_like done: 2 ranks, 3 epochs' || true)
if [ -z "$line" ]; then echo "FAIL: no summary line from rank 0"; exit 1; fi
case "$line" in
  *"same weights on every rank: yes"*) ;;
  *) echo "FAIL: the ranks' weights differ"; exit 1 ;;
esac
echo "$line" | awk '{
  for (i = 1; i <= NF; i++) if ($i == "->") { first = $(i - 1); last = $(i + 1) }
  sub(/,$/, "", last)
  if (first == "" || last == "") { print "FAIL: no loss in the summary"; exit 1 }
  if (!(last + 0 < first + 0)) { print "FAIL: the loss did not fall: " first " -> " last; exit 1 }
  print "OK: loss " first " -> " last ", same weights on every rank"
}'
