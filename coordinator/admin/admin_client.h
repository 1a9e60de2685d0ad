#pragma once
// AdminClient: the gRPC adapter behind troikactl — the coordinator's admin RPCs (ListJobs,
// DescribeJob, CancelJob, the timeline calls) as blocking calls returning plain structs
// (coordinator/job_info.h). Errors are the coordinator's own statuses (NOT_FOUND "no job named 'x'
// ..."), or UNAVAILABLE / DEADLINE_EXCEEDED when it cannot be reached within the timeout.
//
// Thread-safe (a gRPC stub); each call blocks its caller for at most the timeout.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "coordinator/job/job_info.h"

namespace troika::coordinator {

class AdminClient {
 public:
  // `address`: the coordinator (host:port, ...: common/address.h), reached with `tls`; every
  // call carries `admin_token`, and DescribeJob also `job_token` where one is given: the
  // coordinator describes a job to the holder of its own token (the other calls need the
  // admin token). Empty tokens are not sent. Connects lazily; never fails here: if `address`
  // is malformed (INVALID_ARGUMENT), names a missing socket or a host that does not resolve
  // (UNAVAILABLE), or `tls` cannot secure the channel, every call returns why. A coordinator
  // that cannot be reached is UNAVAILABLE "cannot reach the coordinator at ADDRESS (...)".
  AdminClient(const std::string& address, const ClientTls& tls, std::string admin_token,
              absl::Duration timeout = absl::Seconds(10), std::string job_token = {});
  ~AdminClient();
  AdminClient(const AdminClient&) = delete;
  AdminClient& operator=(const AdminClient&) = delete;

  absl::StatusOr<std::vector<JobSummary>> ListJobs();
  absl::StatusOr<JobInfo> DescribeJob(const std::string& job);
  // Aborts `job` with "cancelled by troikactl: <reason>".
  absl::Status CancelJob(const std::string& job, const std::string& reason);
  // Starts writing `job`'s timeline to `file` in the coordinator's --timeline_dir; returns the
  // path on the coordinator. `max_bytes` 0: the coordinator's default cap.
  absl::StatusOr<std::string> StartTimeline(const std::string& job, const std::string& file,
                                            int64_t max_bytes);
  absl::StatusOr<TimelineInfo> StopTimeline(const std::string& job);

 private:
  struct Stub;
  absl::Status Reached(const absl::Status& status) const;

  const std::string address_;
  const absl::Duration timeout_;
  const std::string admin_token_;
  const std::string job_token_;
  absl::Status unusable_;  // why there is no stub, if there is none
  std::unique_ptr<Stub> stub_;
};

}  // namespace troika::coordinator
