#include "coordinator/service/coordinator_service.h"

#include <atomic>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/session/session_reactor.h"
#include "common/wire.h"

namespace troika::coordinator {
namespace {

int64_t ToMillis(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

// The credential in `header`, or "" if the call carries none.
std::string Credential(const grpc::CallbackServerContext* context, const char* header) {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find(header);
  return it == metadata.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

// Hostile-input limits of the key-value store (data-plane bootstrap needs a few small keys
// per rank): key length, keys per wait, bytes held per job.
constexpr size_t kMaxKvKeyBytes = 1024;
constexpr int kMaxKvWaitKeys = 1 << 16;
constexpr int64_t kMaxKvBytesPerJob = int64_t{256} << 20;

absl::Status CheckKvKey(const std::string& key) {
  if (key.empty() || key.size() > kMaxKvKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a key-value store key must have 1 to ",
                                                   kMaxKvKeyBytes, " bytes, not ", key.size()));
  }
  return absl::OkStatus();
}

absl::Status WrongToken(const std::string& job, const std::string& token) {
  return absl::PermissionDeniedError(absl::StrCat(
      "job '", job, "': ", token.empty() ? "this call carries no job token" : "wrong job token",
      " (TROIKA_JOB_TOKEN, TROIKA_JOB_TOKEN_FILE or --job_token_file)"));
}

void ToWire(const TuningParams& in, v1::NegotiationOptionsDescription* out) {
  out->set_fusion_threshold_bytes(in.fusion_threshold_bytes);
  out->set_cycle_time_ms(absl::ToDoubleMilliseconds(in.cycle_time));
}

void ToWire(const TimelineInfo& in, v1::TimelineDescription* out) {
  out->set_active(in.active);
  out->set_path(in.path);
  out->set_bytes_written(in.bytes_written);
  out->set_truncated(in.truncated);
}

void ToWire(const JobInfo& info, v1::JobDescription* out) {
  out->set_name(info.name);
  out->set_size(info.size);
  out->set_state(info.state);
  out->set_epoch(info.epoch);
  out->set_min_size(info.min_size);
  out->set_max_size(info.max_size);
  out->set_generation_cause(info.generation_cause);
  out->set_abort_reason(info.abort_reason);
  out->set_age_ms(ToMillis(info.age));
  for (const RankInfo& r : info.ranks) {
    v1::RankDescription* rank = out->add_ranks();
    rank->set_rank(r.rank);
    rank->set_host(r.host);
    rank->set_attached(r.attached);
    rank->set_local_rank(r.local_rank);
    rank->set_cross_rank(r.cross_rank);
    rank->set_connected(r.connected);
    rank->set_departed(r.departed);
  }
  for (const PendingTensorInfo& p : info.pending) {
    v1::PendingTensorDescription* pending = out->add_pending();
    pending->set_name(p.name);
    pending->set_waiting_ms(ToMillis(p.waiting));
    pending->mutable_missing_ranks()->Add(p.missing_ranks.begin(), p.missing_ranks.end());
  }
  v1::StragglerDescription* stragglers = out->mutable_stragglers();
  stragglers->set_tensors(info.stragglers.tensors);
  stragglers->set_window_size(info.stragglers.window_size);
  stragglers->mutable_straggling()->Add(info.stragglers.straggling.begin(),
                                        info.stragglers.straggling.end());
  for (const RankLateness& l : info.stragglers.ranks) {
    v1::RankLatenessDescription* rank = stragglers->add_ranks();
    rank->set_rank(l.rank);
    rank->set_tensors(l.count);
    rank->set_mean_lateness_ms(absl::ToDoubleMilliseconds(l.mean_lateness));
    rank->set_max_lateness_ms(absl::ToDoubleMilliseconds(l.max_lateness));
    rank->set_last_count(l.last_count);
    rank->set_window_last_count(l.window_last_count);
    rank->set_window_last_lateness_ms(absl::ToDoubleMilliseconds(l.window_last_lateness));
  }
  v1::ScheduleDescription* schedules = out->mutable_schedules();
  schedules->set_enabled(info.schedules.enabled);
  schedules->set_active(info.schedules.active);
  schedules->set_entries(info.schedules.entries);
  schedules->set_tensors(info.schedules.tensors);
  schedules->set_executing_ranks(info.schedules.executing_ranks);
  schedules->set_published(info.schedules.published);
  schedules->set_ended(info.schedules.ended);
  v1::CacheDescription* cache = out->mutable_cache();
  cache->set_capacity(info.cache.capacity);
  cache->set_entries(info.cache.entries);
  cache->set_hits(info.cache.hits);
  cache->set_misses(info.cache.misses);
  cache->set_evictions(info.cache.evictions);
  cache->set_resends(info.cache.resends);
  ToWire(TuningParams{info.negotiation.fusion_threshold_bytes, info.negotiation.cycle_time},
         out->mutable_negotiation());
  const AutotuneInfo& a = info.autotune;
  v1::AutotuneDescription* autotune = out->mutable_autotune();
  autotune->set_enabled(a.enabled);
  autotune->set_done(a.done);
  autotune->set_warmup_left(a.warmup_left);
  autotune->set_evaluations(a.evaluations);
  autotune->set_max_samples(a.max_samples);
  ToWire(a.current, autotune->mutable_current());
  ToWire(a.best, autotune->mutable_best());
  autotune->set_best_score(a.best_score);
  ToWire(info.timeline, out->mutable_timeline());
}

}  // namespace

absl::Duration CoordinatorService::WaitFor(int64_t timeout_ms) const {
  if (timeout_ms <= 0) return options_.max_wait;
  return std::min(absl::Milliseconds(timeout_ms), options_.max_wait);
}

absl::StatusOr<std::shared_ptr<Job>> CoordinatorService::Authorized(
    const grpc::CallbackServerContext* context, const std::string& name, int64_t epoch) const {
  auto job = registry_.Find(name);
  const std::string token = Credential(context, kJobTokenHeader);
  if (!job.ok()) return registry_.EndedWith(name, token).value_or(job.status());
  if (!(*job)->TokenMatches(token)) return WrongToken(name, token);
  if (epoch > 0 && epoch != (*job)->epoch()) {
    return absl::AbortedError(absl::StrCat("generation ", epoch, " of job '", name,
                                           "' has ended; the job is at generation ",
                                           (*job)->epoch()));
  }
  return job;
}

absl::Status CoordinatorService::CheckAdmin(const grpc::CallbackServerContext* context) const {
  if (!options_.admin_token.set()) {
    return absl::PermissionDeniedError(
        "administrative calls are disabled: this coordinator has no admin token "
        "(--admin_token_file)");
  }
  const std::string token = Credential(context, kAdminTokenHeader);
  if (!options_.admin_token.Matches(token)) {
    return absl::PermissionDeniedError(absl::StrCat(
        token.empty() ? "this call carries no admin token" : "wrong admin token",
        " (troikactl: --admin_token_file, TROIKA_ADMIN_TOKEN or TROIKA_ADMIN_TOKEN_FILE)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Job>> CoordinatorService::CreateOrJoin(
    const grpc::CallbackServerContext* context, const std::string& name, int size, int min_size,
    int max_size, bool* created, std::string* generated) {
  const std::string token = Credential(context, kJobTokenHeader);
  // An existing job is checked before anything about it (its size) is revealed.
  if (auto found = registry_.Find(name); found.ok() && !(*found)->TokenMatches(token)) {
    return WrongToken(name, token);
  }
  const std::string secret = token.empty() ? Secret::Generate() : token;
  auto job = registry_.CreateJob(name, size, created, Secret::Of(secret), min_size, max_size);
  if (!job.ok()) return job.status();
  if (!*created && !(*job)->TokenMatches(token)) return WrongToken(name, token);  // raced
  if (*created && token.empty()) *generated = secret;
  return job;
}

grpc::ServerUnaryReactor* CoordinatorService::CreateJob(grpc::CallbackServerContext* context,
                                                        const v1::CreateJobRequest* request,
                                                        v1::CreateJobResponse* response) {
  bool created = false;
  std::string generated;
  auto job = CreateOrJoin(context, request->job(), request->size(), request->min_size(),
                          request->max_size(), &created, &generated);
  if (!job.ok()) return FinishWith(context, job.status());
  response->set_job((*job)->name());
  response->set_size((*job)->size());
  response->set_created(created);
  response->set_token(generated);
  return FinishWith(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* CoordinatorService::Attach(grpc::CallbackServerContext* context,
                                                     const v1::AttachRequest* request,
                                                     v1::AttachResponse* response) {
  auto job = Authorized(context, request->job());
  if (!job.ok()) return FinishWith(context, job.status());
  if (request->epoch() > 0 && request->epoch() != (*job)->epoch()) {
    // The generation asked for ended before the attach came (the one after it may have ended
    // at once too: a second loss): the renumbering from it is the answer, as for an attach
    // that waited there; from older ones the agent cannot follow.
    std::optional<MembershipChange> change = (*job)->ChangeFrom(request->epoch());
    if (!change) {
      return FinishWith(context, Authorized(context, request->job(), request->epoch()).status());
    }
    ToWire(*change, response->mutable_change());
    return FinishWith(context, absl::OkStatus());
  }
  auto* reactor = context->DefaultReactor();
  std::vector<int> ranks = {request->rank()};
  ranks.insert(ranks.end(), request->more_ranks().begin(), request->more_ranks().end());
  (*job)->Attach(
      ranks, request->host(), WaitFor(request->timeout_ms()),
      [reactor, response](absl::StatusOr<std::vector<Membership>> memberships) {
        if (memberships.ok()) ToWire(*memberships, response);
        // The generation ended without some ranks: the renumbering is the answer.
        std::optional<MembershipChange> change = MembershipChangeOf(memberships.status());
        if (change) ToWire(*change, response->mutable_change());
        reactor->Finish(change ? grpc::Status::OK : ToGrpc(memberships.status()));
      },
      request->again());
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::RegisterNode(grpc::CallbackServerContext* context,
                                                           const v1::RegisterNodeRequest* request,
                                                           v1::RegisterNodeResponse* response) {
  bool created = false;
  std::string generated;
  auto job = CreateOrJoin(context, request->job(), request->size(), request->min_size(),
                          request->max_size(), &created, &generated);
  if (!job.ok()) return FinishWith(context, job.status());
  response->set_token(generated);
  // A node joining a running elastic job is answered at the commit that admits it; the job
  // lets it go if the agent stops waiting (the call is cancelled).
  class Reactor : public grpc::ServerUnaryReactor {
   public:
    void OnCancel() override { cancelled->store(true); }
    void OnDone() override { delete this; }
    const std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>();
  };
  auto* reactor = new Reactor;
  (*job)->RegisterNode(
      request->host(), request->nproc(), request->node_rank(),
      [reactor, response](absl::StatusOr<Job::NodeBlock> block) {
        if (block.ok()) {
          response->set_first_rank(block->first_rank);
          response->set_node_rank(block->node_rank);
          response->set_size(block->size);
          response->set_epoch(block->epoch);
          for (const auto& a : block->admitted) ToWire(a, response->add_admitted());
        }
        reactor->Finish(ToGrpc(block.status()));
      },
      [cancelled = reactor->cancelled] { return cancelled->load(); }, request->join_id());
  return reactor;
}

grpc::ServerBidiReactor<v1::Up, v1::Down>* CoordinatorService::Session(
    grpc::CallbackServerContext* context) {
  return new session::SessionReactor(
      [this, context](
          const std::string& job) -> absl::StatusOr<std::shared_ptr<session::SessionHandler>> {
        auto found = Authorized(context, job);
        if (!found.ok()) return found.status();
        return std::shared_ptr<session::SessionHandler>(*std::move(found));
      },
      "the coordinator", &stats_);
}

grpc::ServerUnaryReactor* CoordinatorService::KvSet(grpc::CallbackServerContext* context,
                                                    const v1::KvSetRequest* request,
                                                    v1::KvSetResponse* response) {
  if (absl::Status s = CheckKvKey(request->key()); !s.ok()) return FinishWith(context, s);
  // Not checked against the epoch: a set of an ended generation's (its keys are under its
  // epoch) is harmless, and an agent taking a job back from a restarted coordinator sets
  // again what its ranks set, of earlier generations too.
  auto job = Authorized(context, request->job());
  if (!job.ok()) return FinishWith(context, job.status());
  if ((*job)->kv().bytes() + static_cast<int64_t>(request->key().size() + request->value().size()) >
      kMaxKvBytesPerJob) {
    return FinishWith(context, absl::ResourceExhaustedError(absl::StrCat(
                                   "job '", request->job(), "': its key-value store holds ",
                                   kMaxKvBytesPerJob, " bytes at most")));
  }
  (*job)->kv().Set(request->key(), request->value());
  return FinishWith(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* CoordinatorService::KvGet(grpc::CallbackServerContext* context,
                                                    const v1::KvGetRequest* request,
                                                    v1::KvGetResponse* response) {
  if (absl::Status s = CheckKvKey(request->key()); !s.ok()) return FinishWith(context, s);
  auto job = Authorized(context, request->job(), request->epoch());
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
  if (request->keys_size() > kMaxKvWaitKeys) {
    return FinishWith(
        context, absl::InvalidArgumentError(absl::StrCat("a wait names at most ", kMaxKvWaitKeys,
                                                         " keys, not ", request->keys_size())));
  }
  for (const std::string& key : request->keys()) {
    if (absl::Status s = CheckKvKey(key); !s.ok()) return FinishWith(context, s);
  }
  auto job = Authorized(context, request->job(), request->epoch());
  if (!job.ok()) return FinishWith(context, job.status());
  auto* reactor = context->DefaultReactor();
  std::vector<std::string> keys(request->keys().begin(), request->keys().end());
  (*job)->kv().Wait(keys, WaitFor(request->timeout_ms()),
                    [reactor](absl::Status status) { reactor->Finish(ToGrpc(status)); });
  return reactor;
}

// The administrative calls check the admin token before anything is read or changed.

grpc::ServerUnaryReactor* CoordinatorService::ListJobs(grpc::CallbackServerContext* context,
                                                       const v1::ListJobsRequest* request,
                                                       v1::ListJobsResponse* response) {
  if (absl::Status s = CheckAdmin(context); !s.ok()) return FinishWith(context, s);
  for (const std::shared_ptr<Job>& job : registry_.Jobs()) {
    const JobInfo info = job->Describe();
    v1::JobSummary* summary = response->add_jobs();
    summary->set_name(info.name);
    summary->set_size(info.size);
    summary->set_state(info.state);
    summary->set_attached_ranks(info.attached_ranks());
    summary->set_pending_tensors(static_cast<int32_t>(info.pending.size()));
    summary->set_age_ms(ToMillis(info.age));
  }
  return FinishWith(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* CoordinatorService::DescribeJob(grpc::CallbackServerContext* context,
                                                          const v1::DescribeJobRequest* request,
                                                          v1::JobDescription* response) {
  // The admin, or the holder of the job's own token (its ranks, troikactl --job_token_file).
  const absl::Status admin = CheckAdmin(context);
  auto job = admin.ok() ? registry_.Find(request->job()) : Authorized(context, request->job());
  if (!job.ok() && job.status().code() == absl::StatusCode::kPermissionDenied) {
    // Refused both ways: say both, as either would have done.
    return FinishWith(
        context, absl::PermissionDeniedError(absl::StrCat(
                     job.status().message(), "; as an administrative call: ", admin.message())));
  }
  if (!job.ok()) return FinishWith(context, job.status());
  ToWire((*job)->Describe(), response);
  return FinishWith(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* CoordinatorService::CancelJob(grpc::CallbackServerContext* context,
                                                        const v1::CancelJobRequest* request,
                                                        v1::CancelJobResponse* response) {
  if (absl::Status s = CheckAdmin(context); !s.ok()) return FinishWith(context, s);
  auto job = registry_.Find(request->job());
  if (!job.ok()) return FinishWith(context, job.status());
  const std::string reason = request->reason().empty() ? "no reason given" : request->reason();
  const Job::State state = (*job)->state();
  if (state == Job::State::kFinished || state == Job::State::kAborted) {
    return FinishWith(context, absl::FailedPreconditionError(absl::StrCat(
                                   "job '", (*job)->name(), "' is already ", JobStateName(state))));
  }
  (*job)->Abort(AbortCause::kCancelled, "cancelled by troikactl: " + reason);
  return FinishWith(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* CoordinatorService::StartTimeline(grpc::CallbackServerContext* context,
                                                            const v1::StartTimelineRequest* request,
                                                            v1::StartTimelineResponse* response) {
  if (absl::Status s = CheckAdmin(context); !s.ok()) return FinishWith(context, s);
  const std::string& file = request->file();
  // A client picks a name, never a place: nothing outside --timeline_dir is written.
  if (file.empty() || file.find('/') != std::string::npos || file[0] == '.') {
    return FinishWith(context, absl::InvalidArgumentError(absl::StrCat(
                                   "timeline file '", file,
                                   "' must be a plain file name (no '/', not starting with '.')")));
  }
  auto job = registry_.Find(request->job());
  if (!job.ok()) return FinishWith(context, job.status());
  constexpr int64_t kDefaultMaxBytes = int64_t{1} << 30;
  const std::string path = absl::StrCat(options_.timeline_dir, "/", file);
  // Opening the file (a few hundred bytes of header) is the only disk work on this thread.
  absl::Status status = (*job)->StartTimeline(
      path, request->max_bytes() > 0 ? request->max_bytes() : kDefaultMaxBytes);
  if (status.ok()) response->set_path(path);
  return FinishWith(context, status);
}

grpc::ServerUnaryReactor* CoordinatorService::StopTimeline(grpc::CallbackServerContext* context,
                                                           const v1::StopTimelineRequest* request,
                                                           v1::TimelineDescription* response) {
  if (absl::Status s = CheckAdmin(context); !s.ok()) return FinishWith(context, s);
  auto job = registry_.Find(request->job());
  if (!job.ok()) return FinishWith(context, job.status());
  absl::StatusOr<TimelineInfo> info = (*job)->StopTimeline();
  if (info.ok()) ToWire(*info, response);
  return FinishWith(context, info.status());
}

}  // namespace troika::coordinator
