#!/bin/sh
# run_train_example.sh TROIKARUN PYTHON EXAMPLE: runs examples/pytorch/train_mnist_like.py on 2
# ranks for 3 epochs and checks that it finishes with rank 0's summary line and that the mean
# loss fell (last epoch < first). Exit 77 (skipped) if PYTHON lacks torch.
set -eu
troikarun=$1 python=$2 example=$3
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "skipped: $python cannot import torch (Debian: python3-torch)"
  exit 77
fi
out=$("$troikarun" -np 2 -- "$python" "$example" --epochs 3 --log-interval 1000 2>&1) || {
  echo "$out"; echo "FAIL: the example exited with an error"; exit 1; }
echo "$out"
line=$(echo "$out" | grep 'train_mnist_like done: 2 ranks, 3 epochs' || true)
if [ -z "$line" ]; then echo "FAIL: no summary line from rank 0"; exit 1; fi
echo "$line" | awk '{
  for (i = 1; i <= NF; i++) if ($i == "->") { first = $(i - 1); last = $(i + 1) }
  sub(/,$/, "", last)
  if (first == "" || last == "") { print "FAIL: no loss in the summary"; exit 1 }
  if (!(last + 0 < first + 0)) { print "FAIL: the loss did not fall: " first " -> " last; exit 1 }
  print "OK: loss " first " -> " last
}'
