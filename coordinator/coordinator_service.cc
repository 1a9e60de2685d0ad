#include "coordinator/coordinator_service.h"

#include <string>
#include <utility>

#include "common/grpc_status.h"
#include "common/wire.h"
#include "coordinator/session_reactor.h"

namespace troika::coordinator {
namespace {

// A unary call answered at once with `status`.
grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* context,
                                     const absl::Status& status) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpc(status));
  return reactor;
}

}  // namespace

absl::Duration CoordinatorService::WaitFor(int64_t timeout_ms) const {
  if (timeout_ms <= 0) return options_.max_wait;
  return std::min(absl::Milliseconds(timeout_ms), options_.max_wait);
}

grpc::ServerUnaryReactor* CoordinatorService::CreateJob(grpc::CallbackServerContext* context,
                                                        const v1::CreateJobRequest* request,
                                                        v1::CreateJobResponse* response) {
  bool created = false;
  auto job = registry_.CreateJob(request->job(), request->size(), &created);
  if (!job.ok()) return FinishWith(context, job.status());
  response->set_job((*job)->name());
  response->set_size((*job)->size());
  response->set_created(created);
  return FinishWith(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* CoordinatorService::Attach(grpc::CallbackServerContext* context,
                                                     const v1::AttachRequest* request,
                                                     v1::AttachResponse* response) {
  auto job = registry_.Find(request->job());
  if (!job.ok()) return FinishWith(context, job.status());
  auto* reactor = context->DefaultReactor();
  std::vector<int> ranks = {request->rank()};
  ranks.insert(ranks.end(), request->more_ranks().begin(), request->more_ranks().end());
  (*job)->Attach(ranks, request->host(), WaitFor(request->timeout_ms()),
                 [reactor, response](absl::StatusOr<std::vector<Membership>> memberships) {
                   if (memberships.ok()) {
                     ToWire(memberships->front(), response->mutable_membership());
                     for (size_t i = 1; i < memberships->size(); ++i) {
                       ToWire((*memberships)[i], response->add_more());
                     }
                   }
                   reactor->Finish(ToGrpc(memberships.status()));
                 });
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::RegisterNode(grpc::CallbackServerContext* context,
                                                           const v1::RegisterNodeRequest* request,
                                                           v1::RegisterNodeResponse* response) {
  bool created = false;
  auto job = registry_.CreateJob(request->job(), request->size(), &created);
  if (!job.ok()) return FinishWith(context, job.status());
  auto block = (*job)->RegisterNode(request->host(), request->nproc(), request->node_rank());
  if (!block.ok()) return FinishWith(context, block.status());
  response->set_first_rank(block->first);
  response->set_node_rank(block->second);
  return FinishWith(context, absl::OkStatus());
}

grpc::ServerBidiReactor<v1::Up, v1::Down>* CoordinatorService::Session(
    grpc::CallbackServerContext* context) {
  return new SessionReactor(
      [this](const std::string& job) -> absl::StatusOr<std::shared_ptr<SessionHandler>> {
        auto found = registry_.Find(job);
        if (!found.ok()) return found.status();
        return std::shared_ptr<SessionHandler>(*std::move(found));
      },
      &stats_);
}

grpc::ServerUnaryReactor* CoordinatorService::KvSet(grpc::CallbackServerContext* context,
                                                    const v1::KvSetRequest* request,
                                                    v1::KvSetResponse* response) {
  auto job = registry_.Find(request->job());
  if (!job.ok()) return FinishWith(context, job.status());
  (*job)->kv().Set(request->key(), request->value());
  return FinishWith(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* CoordinatorService::KvGet(grpc::CallbackServerContext* context,
                                                    const v1::KvGetRequest* request,
                                                    v1::KvGetResponse* response) {
  auto job = registry_.Find(request->job());
  if (!job.ok()) return FinishWith(context, job.status());
  auto* reactor = context->DefaultReactor();
  absl::Duration wait =
      request->timeout_ms() > 0 ? WaitFor(request->timeout_ms()) : absl::ZeroDuration();
  (*job)->kv().Get(request->key(), wait, [reactor, response](absl::StatusOr<std::string> value) {
    if (value.ok()) response->set_value(*std::move(value));
    reactor->Finish(ToGrpc(value.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::KvWait(grpc::CallbackServerContext* context,
                                                     const v1::KvWaitRequest* request,
                                                     v1::KvWaitResponse* response) {
  auto job = registry_.Find(request->job());
  if (!job.ok()) return FinishWith(context, job.status());
  auto* reactor = context->DefaultReactor();
  std::vector<std::string> keys(request->keys().begin(), request->keys().end());
  (*job)->kv().Wait(keys, WaitFor(request->timeout_ms()),
                    [reactor](absl::Status status) { reactor->Finish(ToGrpc(status)); });
  return reactor;
}

}  // namespace troika::coordinator
