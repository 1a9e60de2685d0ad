#include "coordinator/job/forming.h"

#include <utility>

#include "common/logging.h"

namespace troika::coordinator {

Forming::Forming(std::string job, int size, Roster& roster, Generations& generations,
                 Lifecycle& lifecycle, Recorder& recorder, const MembershipPolicy& policy)
    : job_(std::move(job)),
      size_(size),
      roster_(roster),
      generations_(generations),
      lifecycle_(lifecycle),
      recorder_(recorder),
      policy_(policy) {}

uint64_t Forming::Wait(const std::vector<int>& ranks, const std::string& host,
                       absl::Duration timeout, Roster::AttachCallback done,
                       std::function<void(uint64_t)> expire) {
  lifecycle_.Reopen();  // a job that looked abandoned has ranks again
  const uint64_t id = roster_.Wait(ranks, host, timeout, std::move(done), std::move(expire));
  if (!roster_.complete()) return id;
  lifecycle_.Run();
  // A job formed anew takes over its record (--state_dir) once it runs: a restarted
  // coordinator resumes the incarnation in force.
  if (generations_.epoch() > 1 && generations_.min_size() == 0) recorder_.Save();
  TROIKA_LOG(INFO) << "job '" << job_ << "': all " << size_ << " ranks attached";
  roster_.Complete();
  return id;
}

std::optional<Verdict> Forming::Expired(uint64_t id, absl::Duration timeout) {
  if (!roster_.waiting(id) || lifecycle_.state() != Lifecycle::State::kAttaching) {
    return std::nullopt;
  }
  Verdict verdict = policy_.AttachTimedOut(timeout);
  roster_.ClearHosts();
  return verdict;
}

void Forming::RegisterNode(const std::string& host, int nproc, int node_rank,
                           Generations::RegisterCallback done, std::function<bool()> cancelled,
                           std::string join_id) {
  if (absl::Status s = policy_.CheckNode(nproc); !s.ok()) return done(s);
  if (policy_.TakesBlocks()) {
    bool added = false;
    absl::StatusOr<NodeBlock> block = roster_.Reserve(host, nproc, node_rank, &added);
    if (added) recorder_.Save();
    // An elastic job's first generation out of blocks holds the node as joining instead.
    if (generations_.min_size() == 0 || !absl::IsResourceExhausted(block.status())) {
      return done(std::move(block));
    }
  }
  if (absl::Status s = policy_.CheckJoin(nproc, generations_.JoiningRanks()); !s.ok()) {
    return done(s);
  }
  TROIKA_LOG(INFO) << "job '" << job_ << "': " << nproc << (nproc == 1 ? " rank" : " ranks")
                   << " on " << host << " wait to join at the next commit";
  generations_.Join({host, nproc, std::move(done), std::move(cancelled), std::move(join_id)});
}

}  // namespace troika::coordinator
