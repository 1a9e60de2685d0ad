#pragma once
// GrpcControlChannel: ControlChannel over gRPC (TCP "host:port" or "unix:/path"), including
// the job's key-value store as a transport::Store.

#include <memory>
#include <mutex>
#include <string>

#include "common/tls.h"
#include "libclient/control/control_channel.h"
#include "troika/v1/troika.grpc.pb.h"

namespace troika::internal {

class GrpcStore;

class GrpcControlChannel final : public ControlChannel {
 public:
  // Connects to `address` (common/address.h), waiting up to `connect_timeout` for the channel:
  // INVALID_ARGUMENT at once for a malformed address; UNAVAILABLE naming the address and the
  // cause, at once for a missing socket or a host that does not resolve, else once
  // `connect_timeout` has passed without a connection. INVALID_ARGUMENT (or the file's error)
  // if `tls` cannot secure a channel to `address`.
  // `job_token`: carried by every call (empty: none; a job this channel creates then gets a
  // generated token, which later calls carry).
  static absl::StatusOr<std::unique_ptr<GrpcControlChannel>> Connect(
      const std::string& address, const ClientTls& tls, std::string job_token = "",
      absl::Duration connect_timeout = absl::Seconds(10));
  ~GrpcControlChannel() override;

  absl::StatusOr<Membership> Join(const std::string& job, int size, int rank, int64_t epoch,
                                  const std::string& host, absl::Duration timeout) override;
  absl::Status OpenSession(const std::string& job, const std::vector<int>& ranks,
                           int64_t epoch) override;
  absl::Status Send(const std::vector<TensorRequest>& requests) override;
  absl::Status SendWaitState(const WaitState& state) override;
  absl::Status SendExecReport(const ExecReport& report) override;
  absl::Status SendScheduleEnded(int64_t id, const std::vector<int>& ranks) override;
  absl::Status SendScheduleDeviated(int64_t id, const std::vector<int>& ranks) override;
  absl::Status Goodbye(const std::vector<int>& ranks) override;
  SessionEvent Receive() override;
  void Cancel() override;
  transport::Store& store() override;

 private:
  GrpcControlChannel(std::string address, std::shared_ptr<grpc::Channel> channel,
                     std::string job_token);
  absl::Status Write(const v1::Up& up);

  const std::string address_;
  std::string job_token_;  // set before Join() returns; constant after
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::unique_ptr<GrpcStore> store_;
  std::unique_ptr<grpc::ClientContext> session_context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::Up, v1::Down>> stream_;

  // Serialises writes with the receiver's Finish(): gRPC forbids them concurrently.
  std::mutex write_mu_;
  bool closed_ = false;  // guarded by write_mu_
};

}  // namespace troika::internal
