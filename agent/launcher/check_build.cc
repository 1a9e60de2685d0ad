#include "agent/launcher/check_build.h"

#include "absl/strings/str_cat.h"

// agent/launcher/CMakeLists.txt defines these for this file alone, from the targets the build
// made (generator expressions: the front ends are configured after agent/).
#ifndef TROIKA_VERSION
#define TROIKA_VERSION "unknown"
#endif
#ifndef TROIKA_BUILT_PYTHON_MODULE
#define TROIKA_BUILT_PYTHON_MODULE 0
#endif
#ifndef TROIKA_BUILT_MXNET_ENGINE
#define TROIKA_BUILT_MXNET_ENGINE 0
#endif
#ifndef TROIKA_BUILT_TF_OPS
#define TROIKA_BUILT_TF_OPS 0
#endif
#ifndef TROIKA_BUILT_GPU_PLANE
#define TROIKA_BUILT_GPU_PLANE 0
#endif

namespace troika::agent {
namespace {

std::string Check(bool built, const char* name) {
  return absl::StrCat("    [", built ? "X" : " ", "] ", name, "\n");
}

}  // namespace

BuildFeatures BuildFeatures::OfThisBuild() {
  BuildFeatures build;
  build.version = TROIKA_VERSION;
  build.torch = TROIKA_BUILT_PYTHON_MODULE;
  build.mxnet = TROIKA_BUILT_PYTHON_MODULE && TROIKA_BUILT_MXNET_ENGINE;
  build.tensorflow = TROIKA_BUILT_PYTHON_MODULE && TROIKA_BUILT_TF_OPS;
  build.nccl = TROIKA_BUILT_GPU_PLANE;
  return build;
}

std::string CheckBuildReport(const BuildFeatures& build, bool verbose) {
  std::string report = absl::StrCat(verbose ? "\n" : "", "Troika v", build.version, ":\n\n");
  absl::StrAppend(&report, "Available Frameworks:\n", Check(build.tensorflow, "TensorFlow"),
                  Check(build.torch, "PyTorch"), Check(build.mxnet, "MXNet"), "\n");
  // Troika's controller is its coordinator, whichever launched the ranks.
  absl::StrAppend(&report, "Available Controllers:\n", Check(false, "MPI"), Check(false, "Gloo"),
                  Check(true, "Troika coordinator"), "\n");
  absl::StrAppend(&report, "Available Tensor Operations:\n", Check(build.nccl, "NCCL"),
                  Check(false, "DDL"), Check(false, "CCL"), Check(false, "MPI"),
                  Check(true, "Gloo"), Check(true, "Shared memory"));
  if (!verbose) return report;
  report += "\n";
  if (!build.torch) {
    report +=
        "PyTorch, MXNet, TensorFlow: the Python module troika._troika was not built (it needs "
        "python3-dev and pybind11-dev; docs/python.md)\n";
  } else if (!build.tensorflow || !build.mxnet) {
    if (!build.tensorflow) {
      report +=
          "TensorFlow: troika.tensorflow's op library was not built (no TensorFlow found, or "
          "TROIKA_WITH_TENSORFLOW=0; docs/tensorflow.md)\n";
    }
    if (!build.mxnet) report += "MXNet: troika.mxnet's engine operations were not built\n";
  }
  if (!build.nccl) {
    report +=
        "NCCL: this build has no GPU data plane (no nvcc or NCCL found, or TROIKA_CUDA=OFF; "
        "docs/gpu.md)\n";
  }
  report +=
      "MPI, Gloo (as controllers), DDL, CCL, MPI (as operations): Troika has none; its "
      "coordinator negotiates, and Gloo, shared memory and NCCL move the bytes\n";
  return report;
}

std::string VersionReport(const BuildFeatures& build) {
  return absl::StrCat("Troika ", build.version, "\n");
}

}  // namespace troika::agent
