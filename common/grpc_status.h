#pragma once
// The one pair of functions converting between grpc::Status and absl::Status, and the unary
// call answered at once with an absl::Status that every gRPC service uses.

#include "absl/status/status.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"

namespace troika {

absl::Status FromGrpc(const grpc::Status& status);
grpc::Status ToGrpc(const absl::Status& status);

// Finishes the unary call of `context` at once with `status` (ToGrpc) and returns its reactor,
// for a callback service method to return. Call it at most once per call, on the thread that
// runs the method; it does not block.
grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* context,
                                     const absl::Status& status);

}  // namespace troika
