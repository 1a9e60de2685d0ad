#!/bin/sh
# run_synthetic_example.sh TROIKARUN PYTHON EXAMPLE: runs
# examples/pytorch/pytorch_synthetic_benchmark.py on 2 ranks, briefly, and checks Horovod's
# report: rank 0's total img/sec and every rank's own mean, all positive. Exit 77 (skipped) if
# PYTHON lacks torch.
set -eu
troikarun=$1 python=$2 example=$3
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "skipped: $python cannot import torch (Debian: python3-torch)"
  exit 77
fi
out=$("$troikarun" -np 2 -- "$python" "$example" --model cnn --no-cuda --num-warmup-batches 1 \
  --num-batches-per-iter 2 --num-iters 3 2>&1) || {
  echo "$out"; echo "FAIL: the example exited with an error"; exit 1; }
echo "$out"
echo "$out" | awk '
  /^\[0\] Total img\/sec on 2 CPU\(s\): / { total = $7 }
  /^\[0\] Img\/sec of each rank: / { each = $0; sub(/.*rank: /, "", each); sub(/ \(sum.*/, "", each) }
  END {
    if (!(total + 0 > 0)) { print "FAIL: no positive total img/sec from rank 0"; exit 1 }
    n = split(each, m, ", ")
    if (n != 2 || !(m[1] + 0 > 0) || !(m[2] + 0 > 0)) { print "FAIL: not 2 positive per-rank means: " each; exit 1 }
    print "OK: total " total " img/sec, per rank " each
  }'
