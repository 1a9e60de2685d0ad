#!/bin/sh
# check_no_gpu_libraries.sh LIBTROIKA: libtroika needs no NCCL and no shared CUDA runtime
# (neither it nor anything it needs lists libnccl or libcudart), and does not export the
# static CUDA runtime it carries. Loading either library with libtroika would hand it to a
# framework imported later (PyTorch, TensorFlow), whose newer libraries then fail to load
# ("undefined symbol: ncclCommResume"); docs/gpu.md, "Which NCCL".
set -eu
lib=$1
status=0
if [ ! -s "$lib" ]; then
  echo "missing: $lib"; exit 1
fi
if readelf -d "$lib" | grep -E 'NEEDED.*(libnccl|libcudart)'; then
  echo "FAIL: $lib lists NCCL or the shared CUDA runtime as needed"; status=1
else
  echo "ok: $lib needs neither libnccl nor libcudart"
fi
if ldd "$lib" | grep -E 'libnccl|libcudart'; then
  echo "FAIL: $lib loads NCCL or the shared CUDA runtime through a library it needs"; status=1
else
  echo "ok: nothing $lib needs loads libnccl or libcudart"
fi
if nm -D --defined-only "$lib" | grep -E ' (cuda[A-Z]|__cuda)' | head -5 | grep .; then
  echo "FAIL: $lib exports CUDA runtime functions (the static runtime must stay its own)"
  status=1
else
  echo "ok: $lib exports no CUDA runtime function"
fi
exit $status
