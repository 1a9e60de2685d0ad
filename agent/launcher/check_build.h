#pragma once
// troikarun --check-build (-cb): what this build of Troika has, in horovodrun's layout.
//
// Pure functions; thread-safe.

#include <string>

namespace troika::agent {

struct BuildFeatures {
  std::string version;  // Troika's, "0.1.0"
  // Frameworks whose Troika front ends this build made: troika.torch and troika.mxnet need
  // the Python module troika._troika (and troika.mxnet its engine operations),
  // troika.tensorflow its op library.
  bool torch = false;
  bool tensorflow = false;
  bool mxnet = false;
  // The GPU data plane (NCCL). Gloo, shared memory and the coordinator are always built.
  bool nccl = false;

  // What the build system found when it built this program.
  static BuildFeatures OfThisBuild();
};

// horovodrun --check-build's report: available frameworks, controllers and tensor operations,
// each "[X] name" or "[ ] name". With `verbose`, a blank line first (as horovodrun) and why
// each missing piece is missing.
std::string CheckBuildReport(const BuildFeatures& build, bool verbose);

// What --version prints: "Troika 0.1.0\n".
std::string VersionReport(const BuildFeatures& build);

}  // namespace troika::agent
