#!/usr/bin/env bash
# Installs the Debian packages Troika needs (idempotent: skips what is installed), then
# configures and builds it with -j2 into ./build.
#
# Usage: scripts/setup.sh [--no-build | --runtime | --test-tools]
#   (none)        build packages, then build the programs only (RUN_TARGETS: what the
#                 README's run command runs, and what the container image installs)
#   --no-build    build packages only
#   --runtime     only the shared libraries the installed binaries need (the container
#                 image's runtime stage; deploy/docker/Dockerfile); no build
#   --test-tools  build packages and what the test suite runs besides the build (Debian's
#                 test tools and the tests' environments install while it compiles: promtool
#                 and a Prometheus server, yamllint, kubectl, openssl, clang with libFuzzer,
#                 stress-ng (the CPU hog of docs/testing.md's run under load),
#                 build/venv with kubernetes-validate and PyYAML from PyPI, TensorFlow
#                 (tensorflow-cpu 2.21, tf_keras, pytest) in build/venv and TensorFlow 2.16
#                 in build/venv-tf216 for troika.tensorflow's tests (about 3 GB, a minute
#                 on a fast link), torch 2.15 (PyPI's, the CUDA build, which runs on CPU
#                 too) with Keras 3.15 and pytest in build/venv-torch2 for troika.keras on
#                 Keras' torch backend and troika.torch on torch 2 (about 3 GB to download,
#                 5.5 GB installed, under 2 minutes on a fast link), MXNet 1.9.1 with
#                 numpy<1.24 and pytest in build/venv-mxnet for troika.mxnet (a 49 MB
#                 wheel, 300 MB installed), Ray 2.60 in build/venv-ray for troika.ray (a
#                 79 MB wheel, under 300 MB installed), pyspark 4.3 in build/venv-spark for
#                 troika.spark (a 456 MB source package, 520 MB installed; Spark runs on
#                 Debian's openjdk-17-jre-headless), both with TensorFlow 2.21 on numpy 1.26
#                 from the wheelhouse (1.6 GB and 15 to 20 s each), and the wheels
#                 `pip install .` builds with and tensorflow-cpu 2.21's (320 MB, for the
#                 pip tests and those two environments) in build/wheelhouse), Open MPI
#                 (troika-mpi-bench, for bench/shm_compare.py), then build everything: the
#                 programs, the tests and the benchmarks
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git iproute2
  openssh-client  # troikarun -H: agents started on other hosts over ssh
  python3  # tests: checks that written timelines are valid JSON
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev libgloo-dev
  prometheus-cpp-dev civetweb libcivetweb-dev libssl-dev
  pybind11-dev python3-dev  # the Python module troika._troika (python/)
  libyaml-cpp-dev  # troikarun --config-file (horovodrun's YAML)
  python3-venv ninja-build  # `pip install .` (pyproject.toml) into a virtual environment
)
# The packages holding every shared library of the installed binaries and libtroika beyond
# those of debian:12-slim (tests/deploy checks this list against ldd of the build).
RUNTIME_PACKAGES=(
  libabsl20220623 libgrpc++1.51 libgrpc29 libprotobuf32 libre2-9 libc-ares2 libssl3
  libgloo0 libibverbs1 libnl-3-200 libnl-route-3-200 libhiredis0.14
  libprometheus-cpp-core1.0 libcivetweb1 libyaml-cpp0.7
)
# The test tools the build itself needs (CMake looks for them when it configures): installed
# with PACKAGES, before the build.
BUILD_TEST_PACKAGES=(
  openmpi-bin libopenmpi-dev  # troika-mpi-bench: Open MPI beside Troika (bench/shm_compare.py)
  ccache  # the pip install tests' build reuses the build's objects (CMakeLists.txt)
)
# The other test tools: only the tests and the tests' Python environments need them, so they
# install while the build compiles (downloads and unpacking beside the compiler).
TEST_PACKAGES=(prometheus yamllint
  openssl  # tests make TLS certificates (tls_test, deploy/make-secrets.sh)
  clang libclang-rt-14-dev  # the libFuzzer target (scripts/fuzz.sh)
  python3-torch python3-pytest  # the Python tests (tests/python)
  openssh-server  # ssh_hosts_test: hosts in network namespaces, each with its sshd
  openjdk-17-jre-headless  # troika.spark's test: Spark's JVM (build/venv-spark's pyspark)
  stress-ng  # the CPU hog of the whole suite's run under load (docs/testing.md, Under load)
)
KUBERNETES_VALIDATE_VERSION=1.37.0
# troika.tensorflow's tests: the newest TensorFlow in build/venv (the op library is built
# against it), and the oldest supported one in build/venv-tf216, which the same build must run
# on (docs/tensorflow.md).
TENSORFLOW_REQUIREMENTS=("tensorflow-cpu==2.21.*" "tf_keras==2.21.*" pytest==8.3.3)
OLDEST_TENSORFLOW_REQUIREMENTS=("tensorflow-cpu==2.16.*" pytest==8.3.3)
# troika.keras on Keras 3's torch backend, and troika.torch on torch 2 (Debian's python3-torch is
# 1.13; every Keras 3 needs torch >= 2.1): build/venv-torch2, from /usr/bin/python3 so that the
# module built for Debian's Python loads there. PyPI's Linux torch is the CUDA build (its nvidia-*
# packages are needed to import it); it runs on CPU.
TORCH2_REQUIREMENTS=("torch==2.15.*" "keras==3.15.*" pytest==8.3.3)
# The build requirements of `pip install .` (pyproject.toml), downloaded into build/wheelhouse
# for the tests that install the package offline (tests/python/check_pip_install.sh), and the
# TensorFlow (with its requirements) that python_pip_install_tensorflow installs there first.
PIP_BUILD_REQUIREMENTS=(scikit-build-core==1.1.2 pybind11==3.1.0)
PIP_TEST_TENSORFLOW="tensorflow-cpu==2.21.*"
# troika.mxnet's tests: MXNet 1.9.1 (its last release), which imports only with numpy < 1.24
# (it uses np.bool): an environment of its own, build/venv-mxnet (docs/mxnet.md). cloudpickle:
# broadcast_object and allgather_object pickle with it, as Horovod's do.
MXNET_REQUIREMENTS=("mxnet==1.9.1" "numpy<1.24" cloudpickle==3.1.1 pytest==8.3.3)
# troika.ray's tests (docs/ray.md): Ray in build/venv-ray, with the system's site packages for
# Debian's torch (the ranks train with it) and the module built for Debian's Python. Ray Train
# (troika.ray.train) needs ray[train]'s pandas and pyarrow: versions that take Debian's numpy
# 1.24 (torch 1.13 is built against numpy 1.x; the pandas 3.1 and pyarrow 26 that ray[train]
# takes alone want numpy 2).
# Ray Client (ray[client]'s grpcio): RayExecutor through ray:// (tests/python/ray, and
# Horovod's test_ray.py, docs/horovod-compat.md).
RAY_REQUIREMENTS=("ray[train,client]==2.60.0" "grpcio==1.85.4" "pandas==2.2.3" "pyarrow==19.0.1"
                  "numpy<2")
# troika.spark's tests (docs/spark.md): pyspark in build/venv-spark (a 456 MB source package
# that pip builds into a wheel; 520 MB installed), with the system's site packages for Debian's
# torch, as build/venv-ray.
SPARK_REQUIREMENTS=("pyspark==4.3.0")
# troika.tensorflow and troika.keras inside RayExecutor and troika.spark.run (docs/ray.md,
# docs/spark.md): TensorFlow 2.21, the version build/venv's op library is built against, in
# build/venv-ray and build/venv-spark too, offline from build/wheelhouse. Those environments keep
# numpy 1.x for Debian's torch 1.13, so the newest numpy 1.x that TensorFlow 2.21 takes (it wants
# numpy >= 1.26), and ml_dtypes 0.5 (the wheelhouse's 0.7 wants numpy 2). 15 to 20 s and
# 1.6 GB each.
ENGINE_TENSORFLOW_REQUIREMENTS=("tensorflow-cpu==2.21.*" "numpy==1.26.4" "ml_dtypes==0.5.4")
# The programs: troikarun starts troika-agent (and runs a coordinator inside); the image
# installs all of them (CMakeLists.txt, install()).
RUN_TARGETS=(troikarun troika-agent troika-coordinator troikactl troika-example-train)

later=()  # --test-tools: the packages that install beside the build
mode=${1:-}
case "$mode" in
  "") wanted=("${PACKAGES[@]}") ;;
  --no-build) wanted=("${PACKAGES[@]}") ;;
  --runtime) wanted=("${RUNTIME_PACKAGES[@]}") ;;
  --test-tools)
    wanted=("${PACKAGES[@]}" "${BUILD_TEST_PACKAGES[@]}")
    later=("${TEST_PACKAGES[@]}")
    # Debian's kubectl (kubernetes-client) only where there is none: other kubectl packages
    # conflict with it.
    command -v kubectl >/dev/null || later+=(kubernetes-client)
    ;;
  *) echo "usage: $0 [--no-build | --runtime | --test-tools]" >&2; exit 2 ;;
esac

# apt_install PACKAGE...: installs those of them not installed (after one apt-get update).
apt_updated=0
apt_install() {
  local missing=() p start=$SECONDS
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  ((apt_updated)) || apt-get update
  apt_updated=1
  apt-get install -y --no-install-recommends "${missing[@]}"
  echo "setup: the Debian packages installed in $((SECONDS - start)) s"
}
apt_install "${wanted[@]}"

[[ "$mode" == "--runtime" || "$mode" == "--no-build" ]] && exit 0

root=$(cd "$(dirname "$0")/.." && pwd)
if [[ "$mode" == "--test-tools" ]]; then
  venv="$root/build/venv"
  if ! "$venv/bin/kubernetes-validate" --version 2>/dev/null | grep -q "$KUBERNETES_VALIDATE_VERSION"; then
    echo "setup: creating $venv with kubernetes-validate $KUBERNETES_VALIDATE_VERSION"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
      "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" pyyaml==6.0.3
  fi
  # $1: the venv, $2: the package whose version says whether it is there, $3: the version
  # prefix wanted, then the requirements. Reads the installed version without importing the
  # package (seconds); says how long an install took.
  install_into() {
    local env=$1 package=$2 prefix=$3 start=$SECONDS
    shift 3
    if ! "$env/bin/python" -c "import importlib.metadata as m, sys; sys.exit(not m.version('$package').startswith('$prefix'))" 2>/dev/null; then
      echo "setup: installing $* into $env"
      [[ -x "$env/bin/pip" ]] || /usr/bin/python3 -m venv "$env"
      "$env/bin/pip" install --quiet --disable-pip-version-check "$@"
      echo "setup: $env installed in $((SECONDS - start)) s"
    fi
  }
  # The build compiles against build/venv's TensorFlow; the test tools' Debian packages and the
  # other environments only the tests use, so they download and unpack while the build
  # compiles (mostly network and disk). Their output is shown once the build is done.
  install_into "$venv" tensorflow-cpu 2.21. "${TENSORFLOW_REQUIREMENTS[@]}"
  test_envs_log="$root/build/setup-test-envs.log"
  (
    # First the test tools (build/venv-ray and venv-spark take Debian's torch from them).
    apt_install "${later[@]}"
    install_into "$root/build/venv-tf216" tensorflow-cpu 2.16. "${OLDEST_TENSORFLOW_REQUIREMENTS[@]}"
    install_into "$root/build/venv-torch2" torch 2.15. "${TORCH2_REQUIREMENTS[@]}"
    install_into "$root/build/venv-mxnet" mxnet 1.9.1 "${MXNET_REQUIREMENTS[@]}"
    wheelhouse="$root/build/wheelhouse"
    if ! ls "$wheelhouse"/scikit_build_core-1.1.2-*.whl "$wheelhouse"/pybind11-3.1.0-*.whl >/dev/null 2>&1; then
      echo "setup: downloading ${PIP_BUILD_REQUIREMENTS[*]} into $wheelhouse"
      "$venv/bin/pip" download --quiet --disable-pip-version-check -d "$wheelhouse" \
        "${PIP_BUILD_REQUIREMENTS[@]}"
    fi
    if ! ls "$wheelhouse"/tensorflow_cpu-2.21.*.whl >/dev/null 2>&1; then
      echo "setup: downloading $PIP_TEST_TENSORFLOW and its requirements into $wheelhouse"
      "$venv/bin/pip" download --quiet --disable-pip-version-check -d "$wheelhouse" \
        "$PIP_TEST_TENSORFLOW"
    fi
    # The numpy 1.x pins of ENGINE_TENSORFLOW_REQUIREMENTS (the rest is the download above).
    if ! ls "$wheelhouse"/numpy-1.26.4-*.whl "$wheelhouse"/ml_dtypes-0.5.4-*.whl >/dev/null 2>&1; then
      echo "setup: downloading numpy 1.26.4 and ml_dtypes 0.5.4 into $wheelhouse"
      "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps -d "$wheelhouse" \
        "numpy==1.26.4" "ml_dtypes==0.5.4"
    fi
    [[ -x "$root/build/venv-ray/bin/pip" ]] ||
      /usr/bin/python3 -m venv --system-site-packages "$root/build/venv-ray"
    install_into "$root/build/venv-ray" grpcio 1.85.4 "${RAY_REQUIREMENTS[@]}"
    install_into "$root/build/venv-ray" tensorflow-cpu 2.21. --no-index --find-links "$wheelhouse" \
      "${ENGINE_TENSORFLOW_REQUIREMENTS[@]}"
    [[ -x "$root/build/venv-spark/bin/pip" ]] ||
      /usr/bin/python3 -m venv --system-site-packages "$root/build/venv-spark"
    install_into "$root/build/venv-spark" pyspark 4.3.0 "${SPARK_REQUIREMENTS[@]}"
    install_into "$root/build/venv-spark" tensorflow-cpu 2.21. --no-index --find-links "$wheelhouse" \
      "${ENGINE_TENSORFLOW_REQUIREMENTS[@]}"
    # `pip install .[mxnet]`'s test (pyproject.toml's extra): MXNet and its requirements.
    if ! ls "$wheelhouse"/mxnet-1.9.1-*.whl >/dev/null 2>&1; then
      echo "setup: downloading mxnet==1.9.1 and its requirements into $wheelhouse"
      "$venv/bin/pip" download --quiet --disable-pip-version-check -d "$wheelhouse" \
        "mxnet==1.9.1" "numpy<1.24"
    fi
  ) >"$test_envs_log" 2>&1 &
  test_envs=$!
fi
build_start=$SECONDS
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE="${TROIKA_BUILD_TYPE:-RelWithDebInfo}"
if [[ "$mode" == "--test-tools" ]]; then
  build_status=0
  cmake --build "$root/build" -j2 || build_status=$?
  envs_status=0
  wait "$test_envs" || envs_status=$?
  cat "$test_envs_log"
  if ((envs_status != 0)); then
    echo "setup: installing the tests' Python environments failed (exit status $envs_status)" >&2
    exit "$envs_status"
  fi
  if ((build_status != 0)); then exit "$build_status"; fi
  echo "setup: the build took $((SECONDS - build_start)) s"
else
  cmake --build "$root/build" -j2 --target "${RUN_TARGETS[@]}"
fi
