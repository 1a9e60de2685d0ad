#pragma once
// DevicePlacement: where this rank's operations run — on the host, or on the rank's one GPU
// through the device plane it owns — and what a GPU entry carries to get there: its device,
// its wire compression, and what the device waits for before reading its input.
//
// Thread-safe: user threads place their entries concurrently; the plane is the executor's to
// use (plane()) and lives as long as this object.

#include <memory>
#include <mutex>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "libclient/execution/device_plane.h"
#include "libclient/handles/op_state.h"
#include "troika/troika.h"

namespace troika::internal {

class DevicePlacement {
 public:
  // `plane`: this build's device plane, or why there is none (CreateDevicePlane).
  // `default_compression`: for float32 GPU allreduces that name none (Options::compression).
  DevicePlacement(absl::StatusOr<std::unique_ptr<DevicePlane>> plane,
                  Compression default_compression);
  DevicePlacement(const DevicePlacement&) = delete;
  DevicePlacement& operator=(const DevicePlacement&) = delete;

  // The device plane; null when this build or process has none.
  DevicePlane* plane() const { return plane_.get(); }

  // Puts `entry` (its state made) on `device`: a GPU entry gets its device fields and the
  // compression in force (`compression`, else the default for float32 allreduces); a host
  // entry gets `compression` as it is (CheckRequest refuses any). FAILED_PRECONDITION if this
  // build or process has no such device; INVALID_ARGUMENT if another device was used before
  // (one device per rank).
  absl::Status Place(Entry& entry, const Device& device, std::optional<Compression> compression);

 private:
  // Constant after construction.
  const std::unique_ptr<DevicePlane> plane_;
  const absl::Status no_plane_;  // why plane_ is null
  const Compression default_compression_;

  std::mutex mu_;
  int ordinal_ = -1;  // guarded by mu_; the device of this rank's GPU operations
};

}  // namespace troika::internal
