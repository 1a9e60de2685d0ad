#pragma once
// The one pair of functions converting between grpc::Status and absl::Status.

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace troika {

absl::Status FromGrpc(const grpc::Status& status);
grpc::Status ToGrpc(const absl::Status& status);

}  // namespace troika
