#!/bin/sh
# run_kill_test.sh TROIKARUN PYTHON JOB_SCRIPT: kill_rank_job.py on 3 ranks (or TROIKA_KILL_TEST_NP)
# under troikarun. Rank 1 SIGKILLs itself mid-training, so troikarun must exit non-zero; every other rank must have
# raised HorovodInternalError (troika.TroikaError) naming rank 1 less than 5 s after the kill
# (each writes "raised-after SECONDS MESSAGE" to a file in a temporary directory). Exit 77
# (skipped) if PYTHON lacks the framework JOB_SCRIPT trains with: TROIKA_KILL_TEST_IMPORT
# (default torch).
set -u
troikarun=$1 python=$2 script=$3
np=${TROIKA_KILL_TEST_NP:-3} victim=1 limit=5
framework=${TROIKA_KILL_TEST_IMPORT:-torch}
if ! "$python" -c "import $framework" 2>/dev/null; then
  echo "Python kill test skipped: $python cannot import $framework"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
TROIKA_KILL_TEST_DIR=$dir "$troikarun" -np $np -- "$python" "$script"
rc=$?
if [ $rc -eq 0 ]; then
  echo "FAIL: troikarun exited 0 although rank $victim was killed"
  exit 1
fi
echo "troikarun exited $rc (expected: rank $victim was killed)"
if [ ! -f "$dir/killed-at" ]; then
  echo "FAIL: rank $victim never reached its kill (no $dir/killed-at)"
  exit 1
fi
status=0
r=0
while [ $r -lt $np ]; do
  if [ $r -ne $victim ]; then
    if [ ! -f "$dir/rank$r" ]; then
      echo "FAIL: rank $r wrote no result (it did not raise before troikarun's agent ended it)"
      status=1
    else
      line=$(cat "$dir/rank$r")
      echo "rank $r: $line"
      if ! echo "$line" | awk -v limit=$limit -v victim=$victim '
          $1 == "raised-after" && $2 + 0 < limit && index($0, "rank " victim) > 0 { ok = 1 }
          END { exit ok ? 0 : 1 }'; then
        echo "FAIL: rank $r: expected \"raised-after SECONDS MESSAGE\" with SECONDS < $limit" \
             "and a message naming rank $victim"
        status=1
      fi
    fi
  fi
  r=$((r + 1))
done
[ $status -eq 0 ] && echo "PASS: every surviving rank raised within $limit s, naming rank $victim"
exit $status
