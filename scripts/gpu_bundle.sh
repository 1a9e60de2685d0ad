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
          "$build/bench/troika-bench")
for b in "${binaries[@]}"; do
  [[ -x $b ]] || { echo "missing $b: configure with CUDA (docs/gpu.md) and build first" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/lib"
cp "${binaries[@]}" "$out/"
for b in "${binaries[@]}"; do
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
exit $status
RUN
chmod +x "$out/run.sh"
echo "bundle in $out ($(du -sh "$out" | cut -f1)); run $out/run.sh on the GPU machine"
