#pragma once
// Schedules: a job's steady-state schedules (docs/protocol.md, Schedules). Once the responses
// sent to the job's ranks repeat (ScheduleDetector), the period is published as a schedule:
// the ranks execute it without requests, and report their progress in it. Schedules owns the
// schedule in force and what the job learnt from those before it: which neighbouring tensors
// may share a collective (Bucketing: schedules are fused — "bucketed" — as far as the reports
// permit), how often schedules ended (each asks the next one to be seen repeating once more),
// and the ids handed out.
//
// A schedule is published when the job can take one (the caller checks: every rank in a
// session, negotiation idle, ...) and announced, or revoked, to every session through the
// `broadcast` it is given. A rank's requests for the schedule's tensors sent before it had
// the schedule are dropped (Dropped). Rounds every rank reported become ready records, and
// the tensors ranks report waiting for are pending (Pending), as negotiation's are.
//
// Thread contract: not thread-safe; the owning job serialises every call (under its lock,
// which `broadcast` runs under too).

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/messages.h"
#include "coordinator/negotiation/bucketing.h"
#include "coordinator/negotiation/negotiation_observer.h"
#include "coordinator/negotiation/negotiator.h"
#include "coordinator/negotiation/schedule_detector.h"

namespace troika::coordinator {

struct ScheduleOptions {
  // Publish a schedule once the job's responses repeat. Default: off.
  bool enabled = false;
  // Fuse neighbouring entries up to the fusion threshold once the ranks' reports show that no
  // rank needs one's result before it submits the next. Default: on.
  bool buckets = true;
};

// Steady-state schedules of a job (docs/protocol.md, Schedules), for operators.
struct ScheduleInfo {
  bool enabled = false;
  int64_t active = 0;  // the schedule in force; 0: none
  int entries = 0;
  int tensors = 0;
  int executing_ranks = 0;
  int64_t published = 0;
  int64_t ended = 0;
};

class Schedules : public NegotiationObserver {
 public:
  using Broadcast = std::function<void(std::shared_ptr<const DownMessage>)>;

  // `job`: its name, for the log. `size`: its ranks. `whole_job`: set 0's negotiator (outlives
  // this), whose cache the schedules' tensors are in and whose fusion threshold bucketing
  // fills. `broadcast` sends a message to every session of the job.
  Schedules(std::string job, int size, ScheduleOptions options, const Negotiator& whole_job,
            Broadcast broadcast);
  Schedules(const Schedules&) = delete;
  Schedules& operator=(const Schedules&) = delete;

  // Responses about to be sent (at `now`) feed the detector while no schedule is in force.
  void OnSending(const std::vector<Response>& responses, absl::Time now) override;

  // Whether a schedule may be published: schedules are on and none is in force.
  bool seeking() const { return detector_ != nullptr && !active_; }
  // Publishes the period the detector found (after the responses sent last), bucketed where
  // the job learnt it may be, and tells every session. Call only when the job can take a
  // schedule now. A period whose rotation runs in more collectives than another rotation of it
  // would waits for a response that makes it start there (at most kMaxUnalignedPublications
  // calls).
  void MaybePublish();

  // Whether `request` (a rank's, any set) is one of the schedule's tensors from a rank that
  // still executes it: the rank sent it before it had the schedule and executes it as the
  // schedule's; it is not negotiated.
  bool Scheduled(const TensorRequest& request) const;
  // Whether `request` is dropped: Scheduled, or a join that rank sent after such a request
  // (common/schedule_drops.h).
  bool Dropped(const TensorRequest& request);

  // `rank` no longer executes the schedule in force (it ended it, or left the job). The
  // schedule ends once no rank executes it.
  void Leave(int rank);
  // The session's `ranks` stopped executing schedule `id` (EndSchedule); their requests are
  // negotiated again. Nothing if `id` is not in force (it ended before a restart).
  void End(int64_t id, const std::vector<int>& ranks);
  // The session's `ranks` deviated from schedule `id` (DeviateSchedule): every session is
  // told to deviate, once per schedule.
  void Deviate(int64_t id, const std::vector<int>& ranks);

  // What a progress report completed.
  struct Rounds {
    // The tensors of each round every rank has now reported, as ready records of set 0, and
    // the bytes of the round's entries (allreduces), round after round.
    std::vector<ReadyRecord> records;
    std::vector<int64_t> entry_bytes;
    // The reporting rank waits for some of the schedule's tensors (Pending has them).
    bool waiting = false;
  };
  // A report of `rank`'s progress in a schedule, sent at `sent_at` (the coordinator's clock).
  // A report about a schedule not in force, or of a rank that left it, is history: OK, and
  // nothing in `rounds`. INVALID_ARGUMENT, recording nothing, if it is not whole rounds of the
  // schedule in force or names a tensor it lacks. Once kLearnRounds rounds completed, learns
  // which neighbouring tensors may share a collective, and revokes the schedule if its tensors
  // could now run in fewer collectives than when it was published (the next one is bucketed
  // so).
  absl::Status Progress(int rank, const ScheduleProgress& progress, absl::Time sent_at,
                        Rounds* rounds);

  // The schedule's tensors that ranks report waiting for, with the ranks that do not.
  std::vector<PendingTensor> Pending() const;

  // Ids up to `id` were handed out by an earlier coordinator (ranks may still run its
  // schedule): new ids start above it.
  void ReserveIdsThrough(int64_t id) { next_id_ = std::max(next_id_, id + 1); }

  ScheduleInfo Info() const;

  static constexpr int64_t kLearnRounds = 3;
  static constexpr int kMaxUnalignedPublications = 64;

 private:
  struct ActiveSchedule {
    int64_t id = 0;
    ScheduleTensors tensors;
    std::set<int> executing;  // ranks that have not said ScheduleEnded
    std::set<int> dropped;    // ranks whose requests were dropped (DropsForSchedule)
    bool revoked = false;     // every session was told to deviate
    // The period's tensors in ScheduleProgress's order.
    struct Tensor {
      std::string name;
      int entry = 0;
      int64_t bytes = 0;
    };
    std::vector<Tensor> period;
    std::vector<int64_t> entry_bytes;  // by entry
    // Rounds some ranks reported completed: how long each rank's tensors waited for their
    // entry to complete (by rank, then tensor; empty: not reported yet) and when each entry
    // completed (the earliest a rank reported).
    struct Round {
      std::vector<std::vector<absl::Duration>> waited;
      std::vector<absl::Time> completed;
      int reported = 0;
    };
    std::map<int64_t, Round> rounds;
    std::vector<int64_t> reported_through;  // by rank: the last round it reported
    // By rank: what its last report said it waits for, (tensor, round) -> submitted at.
    std::vector<std::map<std::pair<int, int64_t>, absl::Time>> waiting;
    std::vector<Response> responses;  // the schedule's entries, as published
    // Tensors n after which some rank saw a completion before it submitted tensor n + 1
    // (ScheduleProgress::cut_after), over `full_rounds` rounds every rank reported.
    std::set<int> cut_after;
    int64_t full_rounds = 0;
    bool learned = false;   // Learn ran
    bool bucketed = false;  // entries fused beyond negotiation's (Bucketing::Bucket)
    // The fewest collectives its period could run in when it was published (Bucketing::Fewest).
    size_t fewest = 0;
  };

  // Whether `progress` is whole rounds of `schedule` naming only its tensors.
  static absl::Status CheckProgress(const ActiveSchedule& schedule,
                                    const ScheduleProgress& progress);
  // Records the rounds of `progress` (of `rank`) and completes those every rank reported.
  void RecordRounds(int rank, const ScheduleProgress& progress, absl::Time sent_at, Rounds* rounds);
  // The active schedule's round `round` every rank reported: its tensors as ready records.
  void CompleteRound(const ActiveSchedule::Round& round, Rounds* rounds) const;
  // Records which of the active schedule's neighbouring tensors may share a collective
  // (bucketing_); revokes it if it can now run in fewer collectives.
  void Learn();
  // Tells every session to deviate from the active schedule.
  void Revoke();

  // Constant after construction.
  const std::string job_;
  const int size_;
  const Negotiator& whole_job_;
  const Broadcast broadcast_;

  std::unique_ptr<ScheduleDetector> detector_;  // null: schedules are off
  std::optional<ActiveSchedule> active_;
  // Above every id the ranks may know (a restarted coordinator: above the old one's).
  int64_t next_id_ = 1;
  int published_ = 0;
  int ended_ = 0;  // schedules that ended: each asks one more repeat of the next
  Bucketing bucketing_;
  int unaligned_publications_ = 0;  // attempts put off for a rotation in fewer collectives
};

}  // namespace troika::coordinator
