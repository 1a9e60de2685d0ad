#pragma once
// CoordinatorService: the gRPC adapter of the coordinator (callback API). Translates wire
// messages to plain structs and calls into the JobRegistry and its jobs; never blocks a gRPC
// thread — waits (attach, key-value) complete from callbacks.
//
// Thread-safe (gRPC calls it from its own threads).

#include "absl/time/time.h"
#include "common/session/control_stats.h"
#include "coordinator/job/job_registry.h"
#include "coordinator/state/secret.h"
#include "troika/v1/troika.grpc.pb.h"

namespace troika::coordinator {

struct ServiceOptions {
  // Attach and key-value waits are capped at this; a request without a timeout gets it.
  // Default 5 min.
  absl::Duration max_wait = absl::Minutes(5);
  // Where StartTimeline writes (a client names only the file). Default: the working
  // directory.
  std::string timeline_dir = ".";
  // The admin credential: ListJobs, DescribeJob, CancelJob and the timeline calls need it
  // (DescribeJob also takes the job's own token). Unset: administrative calls are refused.
  Secret admin_token;
};

class CoordinatorService final : public v1::Coordinator::CallbackService {
 public:
  CoordinatorService(JobRegistry& registry, ServiceOptions options)
      : registry_(registry), options_(options) {}

  const session::ControlStats& stats() const { return stats_; }

  grpc::ServerUnaryReactor* CreateJob(grpc::CallbackServerContext* context,
                                      const v1::CreateJobRequest* request,
                                      v1::CreateJobResponse* response) override;
  grpc::ServerUnaryReactor* Attach(grpc::CallbackServerContext* context,
                                   const v1::AttachRequest* request,
                                   v1::AttachResponse* response) override;
  grpc::ServerUnaryReactor* RegisterNode(grpc::CallbackServerContext* context,
                                         const v1::RegisterNodeRequest* request,
                                         v1::RegisterNodeResponse* response) override;
  grpc::ServerBidiReactor<v1::Up, v1::Down>* Session(grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* KvSet(grpc::CallbackServerContext* context,
                                  const v1::KvSetRequest* request,
                                  v1::KvSetResponse* response) override;
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* context,
                                  const v1::KvGetRequest* request,
                                  v1::KvGetResponse* response) override;
  grpc::ServerUnaryReactor* KvWait(grpc::CallbackServerContext* context,
                                   const v1::KvWaitRequest* request,
                                   v1::KvWaitResponse* response) override;

  // Administration (troikactl): answered at once from Job::Describe() snapshots, or Abort().
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* DescribeJob(grpc::CallbackServerContext* context,
                                        const v1::DescribeJobRequest* request,
                                        v1::JobDescription* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const v1::CancelJobRequest* request,
                                      v1::CancelJobResponse* response) override;
  grpc::ServerUnaryReactor* StartTimeline(grpc::CallbackServerContext* context,
                                          const v1::StartTimelineRequest* request,
                                          v1::StartTimelineResponse* response) override;
  grpc::ServerUnaryReactor* StopTimeline(grpc::CallbackServerContext* context,
                                         const v1::StopTimelineRequest* request,
                                         v1::TimelineDescription* response) override;

 private:
  absl::Duration WaitFor(int64_t timeout_ms) const;
  // Job `name` if the call carries its token; NOT_FOUND, or PERMISSION_DENIED (changing
  // nothing) otherwise. `epoch` (a key-value call's; 0: any): ABORTED if the job is at
  // another generation (an elastic job changed since the caller attached).
  absl::StatusOr<std::shared_ptr<Job>> Authorized(const grpc::CallbackServerContext* context,
                                                  const std::string& name, int64_t epoch = 0) const;
  // OK if the call carries the admin token; PERMISSION_DENIED otherwise.
  absl::Status CheckAdmin(const grpc::CallbackServerContext* context) const;
  // CreateJob and RegisterNode: the job, created with the call's token (or a generated one,
  // returned in `*generated`) or existing and matching the call's token.
  absl::StatusOr<std::shared_ptr<Job>> CreateOrJoin(const grpc::CallbackServerContext* context,
                                                    const std::string& name, int size, int min_size,
                                                    int max_size, bool* created,
                                                    std::string* generated);

  JobRegistry& registry_;
  const ServiceOptions options_;
  session::ControlStats stats_;
};

}  // namespace troika::coordinator
