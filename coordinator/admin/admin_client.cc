#include "coordinator/admin/admin_client.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/address.h"
#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "troika/v1/troika.grpc.pb.h"

namespace troika::coordinator {
namespace {

TuningParams FromWire(const v1::NegotiationOptionsDescription& in) {
  return {in.fusion_threshold_bytes(), absl::Milliseconds(in.cycle_time_ms())};
}

TimelineInfo FromWire(const v1::TimelineDescription& in) {
  return {in.active(), in.path(), in.bytes_written(), in.truncated()};
}

JobInfo FromWire(const v1::JobDescription& in) {
  JobInfo info;
  info.name = in.name();
  info.size = in.size();
  info.state = in.state();
  info.epoch = in.epoch();
  info.min_size = in.min_size();
  info.max_size = in.max_size();
  info.generation_cause = in.generation_cause();
  info.abort_reason = in.abort_reason();
  info.age = absl::Milliseconds(in.age_ms());
  for (const v1::RankDescription& r : in.ranks()) {
    info.ranks.push_back({r.rank(), r.host(), r.attached(), r.local_rank(), r.cross_rank(),
                          r.connected(), r.departed()});
  }
  for (const v1::PendingTensorDescription& p : in.pending()) {
    info.pending.push_back({p.name(), absl::Milliseconds(p.waiting_ms()),
                            std::vector<int>(p.missing_ranks().begin(), p.missing_ranks().end())});
  }
  info.stragglers.tensors = in.stragglers().tensors();
  info.stragglers.window_size = in.stragglers().window_size();
  info.stragglers.straggling.assign(in.stragglers().straggling().begin(),
                                    in.stragglers().straggling().end());
  for (const v1::RankLatenessDescription& l : in.stragglers().ranks()) {
    RankLateness& out = info.stragglers.ranks.emplace_back();
    out.rank = l.rank();
    out.count = l.tensors();
    out.mean_lateness = absl::Milliseconds(l.mean_lateness_ms());
    out.max_lateness = absl::Milliseconds(l.max_lateness_ms());
    out.last_count = l.last_count();
    out.window_last_count = l.window_last_count();
    out.window_last_lateness = absl::Milliseconds(l.window_last_lateness_ms());
  }
  const v1::ScheduleDescription& s = in.schedules();
  info.schedules = {s.enabled(),         s.active(),    s.entries(), s.tensors(),
                    s.executing_ranks(), s.published(), s.ended()};
  info.cache = {in.cache().capacity(), in.cache().entries(),   in.cache().hits(),
                in.cache().misses(),   in.cache().evictions(), in.cache().resends()};
  const TuningParams negotiation = FromWire(in.negotiation());
  info.negotiation.fusion_threshold_bytes = negotiation.fusion_threshold_bytes;
  info.negotiation.cycle_time = negotiation.cycle_time;
  const v1::AutotuneDescription& a = in.autotune();
  info.autotune = {a.enabled(),        a.done(),        a.warmup_left(),
                   a.evaluations(),    a.max_samples(), FromWire(a.current()),
                   FromWire(a.best()), a.best_score()};
  info.timeline = FromWire(in.timeline());
  return info;
}

}  // namespace

struct AdminClient::Stub {
  std::unique_ptr<v1::Coordinator::Stub> stub;
};

AdminClient::AdminClient(const std::string& address, const ClientTls& tls, std::string admin_token,
                         absl::Duration timeout, std::string job_token)
    : address_(address),
      timeout_(timeout),
      admin_token_(std::move(admin_token)),
      job_token_(std::move(job_token)),
      stub_(std::make_unique<Stub>()) {
  if (auto checked = CheckCoordinatorAddress(address, timeout); !checked.ok()) {
    unusable_ = checked.status();
    return;
  }
  auto credentials = MakeChannelCredentials(tls, address);
  if (!credentials.ok()) {
    unusable_ = credentials.status();
    return;
  }
  stub_->stub = v1::Coordinator::NewStub(grpc::CreateChannel(address, *credentials));
}

AdminClient::~AdminClient() = default;

absl::Status AdminClient::Reached(const absl::Status& status) const {
  if (status.code() == absl::StatusCode::kUnavailable ||
      (status.code() == absl::StatusCode::kDeadlineExceeded &&
       status.message() == "Deadline Exceeded")) {
    // gRPC's own transport-level failure, not an answer from the coordinator.
    return absl::UnavailableError(
        absl::StrCat("cannot reach the coordinator at ", address_, " (", status.message(), ")"));
  }
  return status;
}

namespace {
void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

void AddToken(grpc::ClientContext& context, const char* header, const std::string& token) {
  if (!token.empty()) context.AddMetadata(header, token);
}
}  // namespace

absl::StatusOr<std::vector<JobSummary>> AdminClient::ListJobs() {
  if (!unusable_.ok()) return unusable_;
  grpc::ClientContext context;
  SetDeadline(context, timeout_);
  AddToken(context, kAdminTokenHeader, admin_token_);
  v1::ListJobsResponse response;
  absl::Status status = Reached(FromGrpc(stub_->stub->ListJobs(&context, {}, &response)));
  if (!status.ok()) return status;
  std::vector<JobSummary> jobs;
  for (const v1::JobSummary& j : response.jobs()) {
    jobs.push_back({j.name(), j.size(), j.state(), j.attached_ranks(), j.pending_tensors(),
                    absl::Milliseconds(j.age_ms())});
  }
  return jobs;
}

absl::StatusOr<JobInfo> AdminClient::DescribeJob(const std::string& job) {
  if (!unusable_.ok()) return unusable_;
  grpc::ClientContext context;
  SetDeadline(context, timeout_);
  AddToken(context, kAdminTokenHeader, admin_token_);
  AddToken(context, kJobTokenHeader, job_token_);
  v1::DescribeJobRequest request;
  request.set_job(job);
  v1::JobDescription response;
  absl::Status status = Reached(FromGrpc(stub_->stub->DescribeJob(&context, request, &response)));
  if (!status.ok()) return status;
  return FromWire(response);
}

absl::Status AdminClient::CancelJob(const std::string& job, const std::string& reason) {
  if (!unusable_.ok()) return unusable_;
  grpc::ClientContext context;
  SetDeadline(context, timeout_);
  AddToken(context, kAdminTokenHeader, admin_token_);
  v1::CancelJobRequest request;
  request.set_job(job);
  request.set_reason(reason);
  v1::CancelJobResponse response;
  return Reached(FromGrpc(stub_->stub->CancelJob(&context, request, &response)));
}

absl::StatusOr<std::string> AdminClient::StartTimeline(const std::string& job,
                                                       const std::string& file, int64_t max_bytes) {
  if (!unusable_.ok()) return unusable_;
  grpc::ClientContext context;
  SetDeadline(context, timeout_);
  AddToken(context, kAdminTokenHeader, admin_token_);
  v1::StartTimelineRequest request;
  request.set_job(job);
  request.set_file(file);
  request.set_max_bytes(max_bytes);
  v1::StartTimelineResponse response;
  absl::Status status = Reached(FromGrpc(stub_->stub->StartTimeline(&context, request, &response)));
  if (!status.ok()) return status;
  return response.path();
}

absl::StatusOr<TimelineInfo> AdminClient::StopTimeline(const std::string& job) {
  if (!unusable_.ok()) return unusable_;
  grpc::ClientContext context;
  SetDeadline(context, timeout_);
  AddToken(context, kAdminTokenHeader, admin_token_);
  v1::StopTimelineRequest request;
  request.set_job(job);
  v1::TimelineDescription response;
  absl::Status status = Reached(FromGrpc(stub_->stub->StopTimeline(&context, request, &response)));
  if (!status.ok()) return status;
  return FromWire(response);
}

}  // namespace troika::coordinator
