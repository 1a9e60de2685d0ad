#!/bin/sh
# run_tf_synthetic_example.sh TROIKARUN PYTHON EXAMPLE: runs
# examples/tensorflow2/tensorflow2_synthetic_benchmark.py on 2 ranks, briefly, and checks
# Horovod's report: rank 0's total img/sec and every rank's own mean, all positive. Exit 77
# (skipped) if PYTHON cannot import tensorflow and keras, or if the build has no op library
# (as run_tf_pytest.sh).
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
out=$("$troikarun" -np 2 -- "$python" "$example" --model cnn --num-warmup-batches 2 \
  --num-batches-per-iter 2 --num-iters 3 2>&1) || {
  echo "$out"; echo "FAIL: the example exited with an error"; exit 1; }
echo "$out"
echo "$out" | awk '
  /^\[0\] Iter #[0-9]+: [0-9.]+ img\/sec per CPU$/ { iters++ }
  /^\[0\] Total img\/sec on 2 CPU\(s\): / { total = $7 }
  /^\[0\] Img\/sec of each rank: / { each = $0; sub(/.*rank: /, "", each); sub(/ \(sum.*/, "", each) }
  END {
    if (iters != 3) { print "FAIL: " iters + 0 " Iter lines from rank 0, expected 3"; exit 1 }
    if (!(total + 0 > 0)) { print "FAIL: no positive total img/sec from rank 0"; exit 1 }
    n = split(each, m, ", ")
    if (n != 2 || !(m[1] + 0 > 0) || !(m[2] + 0 > 0)) { print "FAIL: not 2 positive per-rank means: " each; exit 1 }
    print "OK: total " total " img/sec, per rank " each
  }'
