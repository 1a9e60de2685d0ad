#include "libclient/execution/device_placement.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace troika::internal {

DevicePlacement::DevicePlacement(absl::StatusOr<std::unique_ptr<DevicePlane>> plane,
                                 Compression default_compression)
    : plane_(plane.ok() ? *std::move(plane) : nullptr),
      no_plane_(plane.ok() ? absl::OkStatus() : plane.status()),
      default_compression_(default_compression) {}

absl::Status DevicePlacement::Place(Entry& entry, const Device& device,
                                    std::optional<Compression> compression) {
  TensorRequest& r = entry.request;
  if (device.ordinal < 0) {
    r.compression = compression.value_or(Compression::kNone);  // CheckRequest refuses any
    return absl::OkStatus();
  }
  if (plane_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", r.name, "' is on GPU ", device.ordinal, ", but ", no_plane_.message()));
  }
  // A device this process cannot use first (FAILED_PRECONDITION), then one device per rank.
  if (absl::Status s = plane_->CheckDevice(device.ordinal); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("'", r.name, "' is on GPU ", device.ordinal, ", but ", s.message()));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ordinal_ >= 0 && ordinal_ != device.ordinal) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", r.name, "' is on GPU ", device.ordinal, ", but this rank's GPU ",
                       "operations run on GPU ", ordinal_, " (one device per rank)"));
    }
    ordinal_ = device.ordinal;
  }
  r.device = DeviceClass::kGpu;
  const bool compressible = r.type == CollectiveType::kAllreduce && r.dtype == DataType::kFloat32;
  r.compression = compression.value_or(compressible ? default_compression_ : Compression::kNone);
  entry.device = device.ordinal;
  if (device.ready_event != nullptr) {
    entry.ready = std::shared_ptr<void>(std::shared_ptr<void>(), device.ready_event);  // unowned
  } else if (device.ready_stream != nullptr) {
    // Marked now: later work on the caller's stream (the rest of a backward pass) is not waited
    // for.
    auto mark = plane_->MarkStream(device.ordinal, device.ready_stream);
    if (!mark.ok()) {
      return absl::Status(mark.status().code(),
                          absl::StrCat("'", r.name, "': ", mark.status().message()));
    }
    entry.ready = *std::move(mark);
    if (entry.ready == nullptr) entry.ready_stream = device.ready_stream;
  }
  entry.state->on_device = true;
  return absl::OkStatus();
}

}  // namespace troika::internal
