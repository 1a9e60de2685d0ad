#!/usr/bin/env bash
# Bundles a CUDA build for a GPU machine that lacks the Debian -dev packages (docs/gpu.md):
# the GPU test binaries, troika-bench and every shared library they load except the CUDA
# driver/runtime/NCCL (which the GPU machine has), into one folder with a script that runs
# the GPU checks.
#
#   scripts/gpu_bundle.sh [BUILD_DIR] [OUT_DIR]     (defaults: build, build/gpu-bundle)
#   OUT_DIR/run.sh                                   (on the GPU machine)
set -euo pipefail
build=${1:-build}
out=${2:-$build/gpu-bundle}
binaries=("$build/tests/libclient/cuda_kernels_test" "$build/tests/integration/gpu_test"
          "$build/bench/troika-bench" "$build/agent/troikarun" "$build/agent/troika-agent")
root=$(cd "$(dirname "$0")/.." && pwd)
for b in "${binaries[@]}"; do
  [[ -x $b ]] || { echo "missing $b: configure with CUDA (docs/gpu.md) and build first" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/lib"
cp "${binaries[@]}" "$out/"
# The Python GPU tests (tests/python/test_cuda.py on 1 rank): the package as built, the test
# files, and pytest (pure Python, from PyPI) for a machine that may lack it.
module=$(ls "$build"/python/troika/_troika*.so 2>/dev/null | head -n 1)
if [[ -n $module ]]; then
  mkdir -p "$out/python" "$out/tests"
  cp -r "$build/python/troika" "$out/python/"
  find "$out/python" -name __pycache__ -prune -exec rm -rf {} +
  cp "$root"/tests/python/{run_pytest.sh,conftest.py,test_cuda.py} "$out/tests/"
  python3 -m pip install --quiet --disable-pip-version-check --target "$out/pydeps" pytest ||
    echo "gpu_bundle: pytest could not be bundled; run.sh uses the GPU machine's own" >&2
fi
for b in "${binaries[@]}" $module; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libcuda|libcudart|libnccl|libc|libm|libdl|libpthread|librt|ld-linux)[.-]' |
  xargs -r cp -L -t "$out/lib/"
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# The GPU checks of docs/gpu.md: kernel tests, end-to-end tests, the device benchmark.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi -L || true
status=0
"$here/cuda_kernels_test" || status=1
"$here/gpu_test" || status=1
"$here/troika-bench" --device=cuda --repeat=3 || status=1
# troika.torch on CUDA tensors, 1 rank (NCCL needs a GPU per rank), if this python3 can load
# the module (built for the build machine's Python version) and its torch sees a GPU.
if [[ -d $here/python ]]; then
  export PYTHONPATH="$here/python:$here/tests:$here/pydeps" TROIKA_PYTEST_NEEDS_CUDA=1
  if python3 -c 'import troika._troika' 2>/dev/null; then
    "$here/tests/run_pytest.sh" "$here/troikarun" 1 python3 "$here/tests/test_cuda.py" || status=1
  else
    echo "Python GPU tests NOT RUN: python3 here ($(python3 -V 2>&1)) cannot load the module built with $(ls "$here"/python/troika/_troika*.so | xargs -n1 basename)"
    status=1
  fi
fi
exit $status
RUN
chmod +x "$out/run.sh"
echo "bundle in $out ($(du -sh "$out" | cut -f1)); run $out/run.sh on the GPU machine"
