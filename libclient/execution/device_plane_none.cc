// The device plane of a libtroika built without CUDA/NCCL: there is none.

#include "libclient/execution/device_plane.h"

namespace troika::internal {

absl::StatusOr<std::unique_ptr<DevicePlane>> CreateDevicePlane(DevicePlaneOptions) {
  return absl::UnimplementedError(
      "this libtroika was built without the GPU data plane (CUDA and NCCL were not found at "
      "build time; docs/gpu.md)");
}

}  // namespace troika::internal
