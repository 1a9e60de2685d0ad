#!/usr/bin/env bash
# Bundles a CUDA build for a GPU machine that lacks the Debian -dev packages (docs/gpu.md):
# the GPU test binaries, troika-bench, troikarun and every shared library they load except the
# CUDA driver/runtime, NCCL and the C/C++ runtimes (which the GPU machine has, as new or newer),
# stripped of debug information, into one folder with a script that runs the GPU checks.
# libtroika carries its CUDA runtime (static) and loads NCCL at its first GPU operation
# (dlopen: the process's own if loaded, else libnccl.so.2 on the library path, else the
# build's path); only troika-bench's raw NCCL baseline links libnccl.so.2. With
# TROIKA_BUNDLE_NCCL=1 the build's libnccl.so.2 is bundled in OUT_DIR/lib, which run.sh puts
# on LD_LIBRARY_PATH (about 220 MB: more than a device session may carry). With
# TROIKA_BUNDLE_HOROVOD=DIR (a checkout of horovod/horovod, or a git directory of it without a
# work tree, whose tag v0.28.1 is taken) run.sh also runs Horovod's test_torch.py against
# troika.torch on 1 rank (docs/horovod-compat.md).
#
#   scripts/gpu_bundle.sh [BUILD_DIR] [OUT_DIR] [PYTHON...]   (defaults: build, build/gpu-bundle)
#   OUT_DIR/run.sh [LOG_DIR]                                   (on the GPU machine)
#
# PYTHON...: more interpreters to build the Python module for (the GPU machine's python3 may
# be another version than the build's, e.g. ~/.pyenv/versions/3.12.1/bin/python3): each needs
# its development headers; pybind11 comes from the build's (Debian: pybind11-dev).
set -euo pipefail
build=${1:-build}
out=${2:-$build/gpu-bundle}
shift $(($# < 2 ? $# : 2))
binaries=("$build/tests/libclient/cuda_kernels_test" "$build/tests/integration/gpu_test"
          "$build/tests/libclient/nccl_library_test"
          "$build/bench/troika-bench" "$build/agent/troikarun" "$build/agent/troika-agent")
root=$(cd "$(dirname "$0")/.." && pwd)
for b in "${binaries[@]}"; do
  [[ -x $b ]] || { echo "missing $b: configure with CUDA (docs/gpu.md) and build first" >&2; exit 1; }
done
# A libtroika that needs libnccl or libcudart would put them in every process that loads it.
"$root/tests/libclient/check_no_gpu_libraries.sh" "$build/libclient/libtroika.so" > /dev/null ||
  { "$root/tests/libclient/check_no_gpu_libraries.sh" "$build/libclient/libtroika.so" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/lib"
here=$(realpath "$out")
cp "${binaries[@]}" "$out/"
# The Python GPU tests (tests/python/test_cuda.py on 1 rank) and the PyTorch synthetic
# benchmark against DDP: the package as built, the test files and the two benchmark scripts;
# torch and pytest come from the GPU machine.
module=$(ls "$build"/python/troika/_troika*.so 2>/dev/null | head -n 1)
if [[ -n $module ]]; then
  mkdir -p "$out/python" "$out/tests" "$out/examples/pytorch" "$out/bench"
  cp -r "$build/python/troika" "$out/python/"
  find "$out/python" -name __pycache__ -prune -exec rm -rf {} +
  cp "$root"/tests/python/{conftest.py,test_cuda.py} "$out/tests/"
  cp "$root/examples/pytorch/pytorch_synthetic_benchmark.py" "$out/examples/pytorch/"
  cp "$root"/bench/{ddp_synthetic_benchmark.py,torch_bench.py,torch_allreduce_latency.py} \
    "$out/bench/"
  # TROIKA_BUNDLE_HOROVOD=DIR, a checkout of horovod/horovod: its test_torch.py (GPU tests
  # included) against troika.torch with scripts/horovod_compat.py, 1 rank; the test helpers'
  # pure-Python dependencies (cloudpickle, mock) come from this machine. Horovod's files go
  # into the bundle only, never into the repository.
  if [[ -n ${TROIKA_BUNDLE_HOROVOD:-} ]]; then
    hv=$TROIKA_BUNDLE_HOROVOD
    # The parts of Horovod's launcher its test helpers import (horovod_compat.py's list).
    read -r -a helpers < <(cd "$root/scripts" && python3 -c \
      'import horovod_compat; print(" ".join(horovod_compat.RUNNER_HELPERS))')
    if [[ ! -d $hv/test ]]; then  # a git directory without a work tree (e.g. a mirror): v0.28.1
      git_dir=$hv
      hv=$(mktemp -d)
      git --git-dir="$git_dir" archive v0.28.1 test/parallel/test_torch.py test/utils \
        "${helpers[@]}" | tar -x -C "$hv"
    fi
    mkdir -p "$out/horovod/test/parallel" "$out/horovod/test/utils" "$out/horovod/site"
    cp "$hv/test/parallel/test_torch.py" "$out/horovod/test/parallel/"
    cp "$hv"/test/utils/*.py "$out/horovod/test/utils/"
    for path in "${helpers[@]}"; do
      mkdir -p "$out/horovod/$(dirname "$path")"
      cp "$hv/$path" "$out/horovod/$path"
    done
    cp "$root/scripts/horovod_compat.py" "$out/horovod/"
    for pkg in cloudpickle mock; do
      cp -r "$(/usr/bin/python3 -c "import os, $pkg; print(os.path.dirname($pkg.__file__))")" \
        "$out/horovod/site/"
    done
    find "$out/horovod" -name __pycache__ -prune -exec rm -rf {} +
  fi
  # The C++ side of the Python layer's latency benchmark (BUILD/bench as torch_bench.py
  # --build expects it).
  if [[ -f $build/bench/libtroika_bench_loop.so ]]; then
    cp "$build/bench/libtroika_bench_loop.so" "$out/bench/"
  fi
  # The module again for each other interpreter: the build's own compile and link lines
  # (CMake's Makefile generator), with that interpreter's headers and file name.
  dir=$build/python/CMakeFiles/_troika.dir
  for python in "$@"; do
    [[ -f $dir/flags.make && -f $dir/link.txt ]] ||
      { echo "gpu_bundle: $dir has no flags.make/link.txt (a Makefile build is needed)" >&2; exit 1; }
    include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    suffix=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
    flags=$(sed -n 's/^CXX_\(DEFINES\|INCLUDES\|FLAGS\) = //p' "$dir/flags.make" |
            sed "s#-isystem [^ ]*python3[^ ]*#-isystem $include#" | tr '\n' ' ')
    # Each of the module's objects (CMakeFiles/_troika.dir/SOURCE.o, SOURCE under python/)
    # compiled again, in place of the build's in its link line.
    objects=$here/python/objects$suffix
    mkdir -p "$objects"
    link=$(sed "s#troika/_troika[^ ]*\.so#$here/python/troika/_troika$suffix#" "$dir/link.txt")
    for built in $(grep -o 'CMakeFiles/_troika\.dir/[^ ]*\.o' "$dir/link.txt"); do
      source=${built#CMakeFiles/_troika.dir/}
      source=${source%.o}
      object=$objects/${source//\//_}.o
      (cd "$build/python" && eval "c++ $flags -c '$root/python/$source' -o '$object'")
      link=${link/$built/$object}
    done
    (cd "$build/python" && eval "$link")
    rm -rf "$objects"
    echo "gpu_bundle: module for $("$python" -V 2>&1): _troika$suffix"
  done
fi
modules=$(ls "$out"/python/troika/_troika*.so "$out"/bench/*.so 2>/dev/null || true)
for b in "${binaries[@]}" $modules; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u |
  grep -v -E '/(libcuda|libcudart|libnccl|libc|libm|libdl|libpthread|librt|ld-linux|libstdc\+\+|libgcc_s)[.-]' |
  xargs -r cp -L -t "$out/lib/"
if [[ ${TROIKA_BUNDLE_NCCL:-0} == 1 ]]; then
  nccl=$(sed -n 's/^NCCL_LIBRARY:FILEPATH=//p' "$build/CMakeCache.txt")
  cp -L "$(dirname "$nccl")/libnccl.so.2" "$out/lib/"
fi
find "$out" -type f \( -name '*.so*' -o -perm -u+x \) ! -name '*.sh' ! -name '*.py' \
  -exec strip --strip-debug {} + 2>/dev/null || true
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# The GPU checks of docs/gpu.md: kernel tests, end-to-end tests, the device benchmark, the
# Python GPU tests, the kernels under compute-sanitizer. Each step has a time limit; its whole
# output goes to LOG_DIR/<step>.log (default: a temporary folder), its summary here.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
logs=${1:-$(mktemp -d)}
mkdir -p "$logs"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
# The NCCL the GPU data plane will load (libtroika dlopens libnccl.so.2 at its first GPU
# operation; under PyTorch, torch's own): the bundled one, else the library path's. Each
# process logs the one it took ("GPU data plane: NCCL ... from ...").
nccl=
for dir in ${LD_LIBRARY_PATH//:/ }; do
  [[ -z $nccl && -e $dir/libnccl.so.2 ]] && nccl=$dir/libnccl.so.2
done
[[ -n $nccl ]] || nccl=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
[[ -n $nccl ]] || nccl="none (next the path the build found; else set TROIKA_NCCL_LIBRARY or bundle one with TROIKA_BUNDLE_NCCL=1)"
echo "== NCCL on the library path: $nccl"
status=0
step() {  # step NAME SECONDS COMMAND...: runs COMMAND, its output into NAME.log
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  timeout -k 5 "$limit" "$@" > "$logs/$name.log" 2>&1
  rc=$?
  echo "== $name: exit $rc after $((SECONDS - start)) s (log: $logs/$name.log)"
  [[ $rc == 0 ]] || status=1
  return $rc
}
gtest_summary() { grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure$|^.*:[0-9]+: Failure' "$1" | head -40; }
step kernels 120 "$here/cuda_kernels_test"; gtest_summary "$logs/kernels.log"
# NCCL found at run time: none loaded before the first GPU operation, one found on this
# machine, and a GPU operation failing with the loader's reason when it cannot be used (the
# tests of stand-in NCCLs need the build tree: not here).
step nccl_loader 60 "$here/nccl_library_test" \
  --gtest_filter='*LinkingLibtroika*:*SearchFinds*:*GpuOperationFails*'
gtest_summary "$logs/nccl_loader.log"
step gpu_test 180 "$here/gpu_test"; gtest_summary "$logs/gpu_test.log"
grep -m 1 'GPU data plane: NCCL' "$logs/gpu_test.log"
step bench 180 "$here/troika-bench" --device=cuda --repeat=5; cat "$logs/bench.log"
# The kernels under compute-sanitizer's memcheck.
if command -v compute-sanitizer > /dev/null; then
  step sanitizer 120 compute-sanitizer --tool memcheck --error-exitcode 1 "$here/cuda_kernels_test"
  grep -E 'ERROR SUMMARY|PASSED|FAILED' "$logs/sanitizer.log" | tail -n 3
fi
# troika.torch on CUDA tensors, 1 rank (NCCL needs a GPU per rank), if this python3 can load
# the module and its torch sees a GPU.
if [[ -d $here/python ]]; then
  export PYTHONPATH="$here/python:$here/tests"
  if ! python3 -c 'import troika._troika' 2>/dev/null; then
    echo "== pytest: NOT RUN: python3 here ($(python3 -V 2>&1)) cannot load any of" \
      "$(ls "$here"/python/troika/_troika*.so | xargs -n1 basename) (gpu_bundle.sh PYTHON...)"
    status=1
  elif ! python3 -c 'import torch, pytest, sys; sys.exit(not torch.cuda.is_available())'; then
    echo "== pytest: NOT RUN: python3 here lacks torch with CUDA or pytest"
    status=1
  else
    step pytest 180 "$here/troikarun" -np 1 --log_level info -- python3 -m pytest -q -rfEs \
      -p no:cacheprovider "$here/tests/test_cuda.py"
    grep -E 'passed|failed|error|runs without negotiation' "$logs/pytest.log" | tail -n 25
    grep -m 1 'GPU data plane: NCCL' "$logs/pytest.log"  # torch's, already loaded
    # The same with every collective negotiated (no steady-state schedules).
    step pytest_negotiated 180 "$here/troikarun" -np 1 --schedules off -- \
      python3 -m pytest -q -rfEs -p no:cacheprovider "$here/tests/test_cuda.py"
    tail -n 3 "$logs/pytest_negotiated.log"
    # Horovod's own test file against troika.torch on this GPU, 1 rank, as one job
    # (TROIKA_BUNDLE_HOROVOD; docs/horovod-compat.md).
    if [[ -d $here/horovod ]]; then
      step horovod 300 env PYTHONPATH="$here/horovod/site" python3 \
        "$here/horovod/horovod_compat.py" --horovod "$here/horovod" --np 1 --mode file \
        --python python3 --troikarun "$here/troikarun" --package "$here/python" \
        --markdown "$logs/horovod-compat.md"
      grep -E 'summary|failed' "$logs/horovod.log" | head -n 40
    fi
    # Issue 15's Python-layer cost on this machine's CPU cores (ranks with cores of their
    # own, unlike the 2-core dev machine): a 4-byte allreduce through troika.torch vs the C++
    # API in the same ranks, 4 and 2 CPU ranks (about a minute).
    if [[ -f $here/bench/libtroika_bench_loop.so ]]; then
      step py_latency 240 bash -c 'for np in 4 2; do
          python3 "'"$here"'/bench/torch_bench.py" --np $np --troikarun "'"$here"'/troikarun" \
            --python python3 --build "'"$here"'" --repeat 5 --skip-synthetic || exit 1
        done'
      grep -E '^# 4-byte|^median|Error|error:' "$logs/py_latency.log" | head -n 20
    fi
    # The example's synthetic benchmark on this GPU, 1 rank: Troika (with schedules, the
    # default, and negotiated) vs DDP (NCCL), alternating, for a model whose step is mostly
    # kernel launches, the same with 8x the batch, and an MLP.
    step torch 480 bash -c 'for model in "resnet 32" "resnet 256" "mlp 32"; do
        set -- $model
        python3 "'"$here"'/bench/torch_bench.py" --np 1 --troikarun "'"$here"'/troikarun" \
          --python python3 --repeat 2 --skip-latency --troika-negotiated \
          --model $1 --batch-size $2 || exit 1
      done'
    grep -E '^# synthetic|^median|Error|error:' "$logs/torch.log" | head -n 30
    # TROIKA_BUNDLE_CPU_BENCH=1: also issue 15's benchmark, 4 CPU ranks against DDP on gloo,
    # on this machine's cores (fewer neighbours than the 2-core dev machine; ~5 minutes).
    if [[ ${TROIKA_BUNDLE_CPU_BENCH:-0} == 1 ]]; then
      step cpu_torch 420 python3 "$here/bench/torch_bench.py" --np 4 --no-cuda \
        --troikarun "$here/troikarun" --python python3 --repeat 3 --skip-latency --troika-negotiated
      grep -E '^run|^median|Error|error:' "$logs/cpu_torch.log" | head -n 30
    fi
  fi
fi
exit $status
RUN
chmod +x "$out/run.sh"
bash -n "$out/run.sh"
echo "bundle in $out ($(du -sh "$out" | cut -f1)); run $out/run.sh on the GPU machine"
