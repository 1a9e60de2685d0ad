#include "coordinator/job/succession.h"

#include <utility>

#include "common/logging.h"
#include "coordinator/job/job.h"

namespace troika::coordinator {

Succession::Succession(std::string job, Generations& generations, Lifecycle& lifecycle,
                       Roster& roster, Sessions& sessions, Inspection& inspection, Clock& clock)
    : job_(std::move(job)),
      generations_(generations),
      lifecycle_(lifecycle),
      roster_(roster),
      sessions_(sessions),
      inspection_(inspection),
      clock_(clock) {}

void Succession::EndGeneration(const std::shared_ptr<Job>& self, MembershipChange change,
                               std::optional<AbortCause> cause, const std::string& reason,
                               std::optional<RankExit> exit) {
  // The generation ends as an abort does (every session told, attaches and key-value waits
  // failed), but the job goes on: the owner serves the successor under its name from now on.
  std::shared_ptr<Job> successor = generations_.NextGenerationOf(self, change, cause, reason);
  const int size = change.size;
  next_rank_ = change.next_rank;
  std::shared_ptr<const DownMessage> told =
      lifecycle_.EndGeneration(std::move(change), reason, std::move(exit));
  std::unique_ptr<Timeline> timeline = inspection_.TakeTimeline();
  if (timeline) timeline->MembershipChange(clock_.Now(), lifecycle_.abort_reason(), size);
  successor->Inherit({.joiners = generations_.TakeJoiners(),
                      .timeline = std::move(timeline),
                      .change = std::move(told),
                      .ended_epoch = generations_.epoch()});
}

void Succession::AdmitJoiners(const std::shared_ptr<Job>& self) {
  Generations::Admission admission = generations_.Admit(roster_.departed());
  const int size = admission.change.size;
  const int64_t epoch = admission.change.epoch;
  const std::vector<MembershipChange::Admitted> admitted = admission.change.admitted;
  EndGeneration(self, std::move(admission.change), std::nullopt, admission.reason, std::nullopt);
  for (size_t i = 0; i < admission.joiners.size(); ++i) {
    admission.joiners[i].done(NodeBlock{admission.first_ranks[i], -1, size, epoch, admitted});
  }
}

std::shared_ptr<Job> Succession::NextIncarnation(const std::shared_ptr<Job>& self) {
  bool made = false;
  std::shared_ptr<Job> next = generations_.NextIncarnationOf(self, &made);
  if (!made) return next;
  TROIKA_LOG(INFO) << "job '" << job_ << "': ranks attach again; it forms anew (epoch "
                   << generations_.epoch() + 1 << ")";
  next->Inherit({.nodes = roster_.nodes(),
                 .left_exits = generations_.left_exits(),
                 .timeline = inspection_.TakeTimeline()});
  return next;
}

void Succession::LostAfterEnd(const std::vector<int>& ranks, const std::string& reason) {
  const std::shared_ptr<Job>& successor = generations_.successor();
  if (!successor) return;
  std::vector<int> next;
  for (int rank : ranks) {
    if (rank >= 0 && rank < static_cast<int>(next_rank_.size()) && next_rank_[rank] >= 0) {
      next.push_back(next_rank_[rank]);
    }
  }
  if (!next.empty()) successor->LoseBeforeAttach(next, reason);
}

std::shared_ptr<Job> Succession::Serving() const {
  const std::shared_ptr<Job>& successor = generations_.successor();
  if (successor && lifecycle_.running() && successor->state() == Lifecycle::State::kAttaching) {
    return nullptr;
  }
  return successor;
}

std::shared_ptr<Job> Succession::NextGeneration() const {
  return lifecycle_.generation_ended() ? generations_.successor() : nullptr;
}

std::map<int, RankExit> Succession::Inherit(Inheritance inheritance) {
  for (Generations::Joiner& joiner : inheritance.joiners) generations_.Join(std::move(joiner));
  roster_.AddNodes(inheritance.nodes);  // a restarted agent gets its block back (saved as it runs)
  inspection_.AdoptTimeline(std::move(inheritance.timeline));
  if (inheritance.change) sessions_.Follows(std::move(inheritance.change), inheritance.ended_epoch);
  return std::move(inheritance.left_exits);
}

}  // namespace troika::coordinator
