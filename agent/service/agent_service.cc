#include "agent/service/agent_service.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/session/session_reactor.h"
#include "common/wire.h"

namespace troika::agent {
namespace {

absl::Time Deadline(grpc::CallbackServerContext* context) {
  const auto deadline = context->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

}  // namespace

AgentService::AgentService(AgentServiceOptions options, AttachGate& gate,
                           std::shared_ptr<NodeRelay> relay, Upstream& upstream)
    : gate_(gate), upstream_(upstream), options_(std::move(options)), relay_(std::move(relay)) {}

void AgentService::Reform(int size, std::vector<int> ranks, std::shared_ptr<NodeRelay> relay,
                          const std::optional<MembershipChange>& change) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.size = size;
  options_.ranks = std::move(ranks);
  relay_ = std::move(relay);
  if (change) {
    changes_.push_back(*change);
  } else {
    changes_.clear();
  }
}

std::optional<MembershipChange> ChangeSince(const std::vector<MembershipChange>& changes,
                                            int64_t epoch) {
  auto first = std::find_if(changes.begin(), changes.end(),
                            [epoch](const MembershipChange& c) { return c.epoch == epoch + 1; });
  if (first == changes.end()) return std::nullopt;
  MembershipChange composed = *first;
  for (auto it = std::next(first); it != changes.end(); ++it) {
    if (it->epoch != composed.epoch + 1) return std::nullopt;  // a gap: not all known here
    for (int& rank : composed.next_rank) rank = it->NextRank(rank);
    composed.epoch = it->epoch;
    composed.size = it->size;
  }
  // The rank never ran the generations between: it goes on from where it is.
  composed.at_commit = false;
  composed.joined = 0;
  composed.admitted.clear();
  return composed;
}

absl::Status AgentService::CheckJob(const std::string& job) const {
  if (job == options_.job) return absl::OkStatus();
  return absl::NotFoundError(
      absl::StrCat("no job '", job, "' on this troika-agent (its job is '", options_.job, "')"));
}

grpc::ServerUnaryReactor* AgentService::CreateJob(grpc::CallbackServerContext* context,
                                                  const v1::CreateJobRequest* request,
                                                  v1::CreateJobResponse* response) {
  std::lock_guard<std::mutex> lock(mu_);
  if (request->job() == options_.job && request->epoch() > 0) {
    if (std::optional<MembershipChange> change = ChangeSince(changes_, request->epoch())) {
      ToWire(*change, response->mutable_change());
      return FinishWith(context, absl::OkStatus());
    }
  }
  if (request->job() != options_.job || request->size() != options_.size) {
    return FinishWith(
        context, absl::FailedPreconditionError(absl::StrCat(
                     "this troika-agent runs job '", options_.job, "' of ", options_.size,
                     " ranks; a rank asked for job '", request->job(), "' of ", request->size(),
                     " (check TROIKA_JOB and TROIKA_SIZE)")));
  }
  response->set_job(options_.job);
  response->set_size(options_.size);
  response->set_created(false);
  return FinishWith(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* AgentService::Attach(grpc::CallbackServerContext* context,
                                               const v1::AttachRequest* request,
                                               v1::AttachResponse* response) {
  if (absl::Status s = CheckJob(request->job()); !s.ok()) return FinishWith(context, s);
  std::vector<int> ranks = {request->rank()};
  ranks.insert(ranks.end(), request->more_ranks().begin(), request->more_ranks().end());
  std::shared_ptr<NodeRelay> relay;
  {
    std::lock_guard<std::mutex> lock(mu_);
    relay = relay_;
    if (request->epoch() > 0 && !changes_.empty() && request->epoch() != changes_.back().epoch) {
      return FinishWith(context,
                        absl::AbortedError(absl::StrCat(
                            "rank ", request->rank(), " attached for generation ", request->epoch(),
                            "; the job is at generation ", changes_.back().epoch)));
    }
    for (int rank : ranks) {
      if (std::find(options_.ranks.begin(), options_.ranks.end(), rank) == options_.ranks.end()) {
        return FinishWith(context, absl::PermissionDeniedError(absl::StrCat(
                                       "rank ", rank, " does not run on this node (its ranks: ",
                                       FormatRanks(options_.ranks), ")")));
      }
    }
  }
  // Ranks that shut down and call init again (an agent's ranks can only leave by a goodbye):
  // the gate waits for the job's next incarnation.
  if (options_.attach_again && relay->Left(ranks)) {
    if (absl::Status s = options_.attach_again(ranks); !s.ok()) return FinishWith(context, s);
  }
  auto* reactor = context->DefaultReactor();
  gate_.Wait(ranks, [reactor, response](absl::StatusOr<std::vector<Membership>> memberships) {
    if (memberships.ok()) ToWire(*memberships, response);
    reactor->Finish(ToGrpc(memberships.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* AgentService::RegisterNode(grpc::CallbackServerContext* context,
                                                     const v1::RegisterNodeRequest*,
                                                     v1::RegisterNodeResponse*) {
  return FinishWith(context, absl::UnimplementedError(
                                 "RegisterNode goes to the coordinator, not to a troika-agent"));
}

grpc::ServerBidiReactor<v1::Up, v1::Down>* AgentService::Session(grpc::CallbackServerContext*) {
  return new session::SessionReactor(
      [this](const std::string& job) -> absl::StatusOr<std::shared_ptr<session::SessionHandler>> {
        if (absl::Status s = CheckJob(job); !s.ok()) return s;
        std::lock_guard<std::mutex> lock(mu_);
        return std::shared_ptr<session::SessionHandler>(relay_);
      },
      "this node's troika-agent");
}

grpc::ServerUnaryReactor* AgentService::KvSet(grpc::CallbackServerContext* context,
                                              const v1::KvSetRequest* request, v1::KvSetResponse*) {
  if (absl::Status s = CheckJob(request->job()); !s.ok()) return FinishWith(context, s);
  auto* reactor = context->DefaultReactor();
  upstream_.KvSet(
      *request, Deadline(context),
      [reactor](const absl::Status& s, v1::KvSetResponse&) { reactor->Finish(ToGrpc(s)); });
  return reactor;
}

grpc::ServerUnaryReactor* AgentService::KvGet(grpc::CallbackServerContext* context,
                                              const v1::KvGetRequest* request,
                                              v1::KvGetResponse* response) {
  if (absl::Status s = CheckJob(request->job()); !s.ok()) return FinishWith(context, s);
  auto* reactor = context->DefaultReactor();
  upstream_.KvGet(*request, Deadline(context),
                  [reactor, response](const absl::Status& s, v1::KvGetResponse& upstream) {
                    if (s.ok()) response->Swap(&upstream);
                    reactor->Finish(ToGrpc(s));
                  });
  return reactor;
}

grpc::ServerUnaryReactor* AgentService::KvWait(grpc::CallbackServerContext* context,
                                               const v1::KvWaitRequest* request,
                                               v1::KvWaitResponse*) {
  if (absl::Status s = CheckJob(request->job()); !s.ok()) return FinishWith(context, s);
  auto* reactor = context->DefaultReactor();
  upstream_.KvWait(
      *request, Deadline(context),
      [reactor](const absl::Status& s, v1::KvWaitResponse&) { reactor->Finish(ToGrpc(s)); });
  return reactor;
}

}  // namespace troika::agent
