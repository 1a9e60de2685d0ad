#!/bin/sh
# check_no_torch.sh BUILD_PYTHON_DIR MODULE: the module troika._troika is built and linked
# without any torch path (compile flags, include dirs, link line) and loads no torch library,
# so one build works with every torch a user has.
set -eu
dir=$1 module=$2
status=0
for f in "$dir/CMakeFiles/_troika.dir/flags.make" "$dir/CMakeFiles/_troika.dir/link.txt"; do
  if [ ! -s "$f" ]; then
    echo "missing: $f"; exit 1
  fi
  if grep -i torch "$f"; then
    echo "FAIL: $f names torch"; status=1
  else
    echo "ok: no torch in $f"
  fi
done
if ldd "$module" | grep -i torch; then
  echo "FAIL: $module links a torch library"; status=1
else
  echo "ok: $module links no torch library"
fi
exit $status
