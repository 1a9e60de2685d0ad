// Job: elastic jobs (docs/elastic.md) — losing ranks ends a generation instead of the job, and
// nodes that register while it runs are admitted at a commit (Generations keeps them).

#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/job/job.h"

namespace troika::coordinator {

void Job::LoseRanksLocked(const std::vector<int>& lost, AbortCause cause, const std::string& reason,
                          std::optional<RankExit> exit) {
  if (!generations_.elastic() || !lifecycle_.running() || sessions_.resyncing() ||
      lifecycle_.detached()) {
    return AbortLocked(cause, reason, std::move(exit));
  }
  MembershipChange change = generations_.Survivors(lost, roster_.departed());
  if (change.size < min_size()) {
    return AbortLocked(cause,
                       absl::StrCat(reason, "; ", change.size,
                                    change.size == 1 ? " rank remains" : " ranks remain",
                                    ", below the job's minimum of ", min_size()),
                       std::move(exit));
  }
  EndGenerationLocked(std::move(change), cause, reason, std::move(exit));
}

void Job::EndGenerationLocked(MembershipChange change, std::optional<AbortCause> cause,
                              const std::string& reason, std::optional<RankExit> exit) {
  // The generation ends as an abort does (every session told, attaches and key-value waits
  // failed), but the job goes on: the owner serves the successor under its name from now on.
  std::shared_ptr<Job> successor =
      generations_.NextGenerationOf(shared_from_this(), change, cause, reason);
  const int size = change.size;
  lifecycle_.EndGeneration(std::move(change), reason, std::move(exit));
  if (std::unique_ptr<Timeline> timeline = telemetry_.TakeTimeline()) {
    timeline->MembershipChange(clock_.Now(), lifecycle_.abort_reason(), size);
    successor->AdoptTimeline(std::move(timeline));
  }
}

bool Job::AdmitsAtCommitLocked() const {
  return lifecycle_.running() && !sessions_.resyncing() && !lifecycle_.detached();
}

void Job::AdmitJoinersLocked() {
  Generations::Admission admission = generations_.Admit(roster_.departed());
  const int size = admission.change.size;
  const int64_t epoch = admission.change.epoch;
  EndGenerationLocked(std::move(admission.change), std::nullopt, admission.reason, std::nullopt);
  for (size_t i = 0; i < admission.joiners.size(); ++i) {
    admission.joiners[i].done(NodeBlock{admission.first_ranks[i], -1, size, epoch});
  }
}

void Job::AdoptJoiners(std::vector<Generations::Joiner> joiners) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Generations::Joiner& joiner : joiners) generations_.Join(std::move(joiner));
}

void Job::AdoptTimeline(std::unique_ptr<Timeline> timeline) {
  std::lock_guard<std::mutex> lock(mu_);
  telemetry_.AdoptTimeline(std::move(timeline));
  SyncSettingsLocked();  // the ranks report their phases
}

void Job::Track(const std::shared_ptr<JobLineage>& lineage) {
  std::lock_guard<std::mutex> lock(mu_);
  generations_.Track(lineage);
}

std::shared_ptr<Job> Job::successor() const {
  std::lock_guard<std::mutex> lock(mu_);
  // A next incarnation still attaching while this one runs (some ranks have not shut down
  // yet) does not serve the job's name yet: the ranks that run still use this one's
  // key-value store. Attaches reach it through this one (Attach). Lock order: an
  // incarnation, then its successor.
  const std::shared_ptr<Job>& successor = generations_.successor();
  if (successor && lifecycle_.running() && successor->state() == State::kAttaching) {
    return nullptr;
  }
  return successor;
}

}  // namespace troika::coordinator
