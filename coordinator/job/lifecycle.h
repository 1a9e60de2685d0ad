#pragma once
// Lifecycle: one job's state, the transitions between its states, and what each transition
// tells the job's other parts (Roster, Sessions, Generations, the key-value store):
//
//   kAttaching ──Run──▶ kRunning ──Finish──▶ kFinished
//        │                  │                    │ (finished_too: a rank that had left
//        └──── Abort, EndGeneration ──▶ kAborted ◀┘  failed while the job formed again)
//
// Besides the state it keeps why the job was aborted, whether the coordinator detached it
// (Detach), and whether its owner was told it is done. A job is done — its owner may drop
// it — once it is over (finished or aborted, or attaching with no rank attached any more)
// and no session or attach is open; a detached job never is.
//
// Thread contract: not thread-safe; the owning Job serialises every call under its lock.
// on_abort, the sessions' sinks, attach and join callbacks run under that lock; on_done runs
// on the scheduler's thread, without it.

#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/messages.h"
#include "common/scheduler.h"
#include "coordinator/job/generations.h"
#include "coordinator/job/job_options.h"
#include "coordinator/job/roster.h"
#include "coordinator/job/sessions.h"
#include "coordinator/state/kv_store.h"

namespace troika::coordinator {

class Lifecycle {
 public:
  enum class State { kAttaching, kRunning, kFinished, kAborted };

  // `job`: the job's name, for messages. The parts are the job's own and outlive this.
  // `on_abort` (may be null) is called when the job is aborted, not when a generation ends;
  // `on_done` is posted to `scheduler` once the job becomes done.
  Lifecycle(std::string job, Roster& roster, Sessions& sessions, Generations& generations,
            KvStore& kv, Scheduler& scheduler, std::function<void(AbortCause)> on_abort,
            std::function<void()> on_done);
  Lifecycle(const Lifecycle&) = delete;
  Lifecycle& operator=(const Lifecycle&) = delete;

  State state() const { return state_; }
  bool running() const { return state_ == State::kRunning; }
  // Finished or aborted.
  bool over() const { return state_ == State::kFinished || state_ == State::kAborted; }
  bool detached() const { return detached_; }
  // Why the job was aborted (without the "job 'x' aborted: " prefix), or why its generation
  // ended; empty unless aborted.
  const std::string& abort_reason() const { return abort_reason_; }
  // What every session was told when the job was aborted (Abort, with the exit that caused
  // it) or its generation ended (EndGeneration, with the change), for a session that opens
  // only afterwards; null unless aborted.
  const std::shared_ptr<const DownMessage>& abort_message() const { return abort_message_; }
  // Whether the job's generation ended for a change (EndGeneration): the job goes on as its
  // successor.
  bool generation_ended() const {
    return abort_message_ != nullptr && abort_message_->membership_change.has_value();
  }

  // OK while the job runs; else UNAVAILABLE once detached ("the coordinator is restarting"),
  // or FAILED_PRECONDITION "job 'x' is <state>; <what>" (an aborted job's reason in
  // parentheses after its state).
  absl::Status CheckRunning(absl::string_view what) const;
  // OK unless the job is over: FAILED_PRECONDITION as above (`what` may be empty).
  absl::Status CheckNotOver(absl::string_view what) const;
  // CheckNotOver for an attach, except that a generation that ended answers it as it answered
  // the attaches waiting then: ABORTED with its change (MembershipChanged), so that the node
  // follows into the next generation. (An agent that found this generation serving the job's
  // name may attach only after a second loss ended it.)
  absl::Status CheckAttachable(absl::string_view what) const;

  // kAttaching → kRunning: every rank attached.
  void Run();
  // kRunning → kFinished once every rank departed (Roster): nodes waiting to join are
  // refused. Returns whether the job finished now.
  bool FinishIfAllDeparted();
  // → kAborted: calls on_abort, sends "job 'x' aborted: <reason>" (with the exit that caused
  // it, if any) to every session, and fails the waiting attaches, the joining nodes and the
  // key-value waits with it (ABORTED); a resumption under way is dropped, and a next
  // incarnation still forming is aborted too (Generations::AbortForming). A finished job is
  // aborted only with `finished_too`. Returns false, doing nothing, if the job was over.
  bool Abort(AbortCause cause, const std::string& reason, std::optional<RankExit> exit,
             bool finished_too);
  // → kAborted as an elastic generation ends for `change` (the successor exists already):
  // every session is told the change, the waiting attaches are answered ABORTED with it
  // (MembershipChanged), as is any later attach (CheckAttachable), key-value waits fail;
  // on_abort is not called. The abort reason becomes `reason` and the generation the job goes
  // on as. Returns what the sessions were told.
  std::shared_ptr<const DownMessage> EndGeneration(MembershipChange change,
                                                   const std::string& reason,
                                                   std::optional<RankExit> exit);
  // The coordinator stops but keeps the job for a restarted one: every session ends with
  // UNAVAILABLE `reason`, the waiting attaches, joining nodes and key-value waits fail with
  // it, and the job is never done. Nothing happens to a job that is over.
  void Detach(const std::string& reason);
  // Fails the waiting attaches and the joining nodes with `status`.
  void FailWaiting(const absl::Status& status);

  bool done() const;
  // Posts on_done once the job is done, once; again after Reopen.
  void MaybeDone();
  // Ranks attach to a job that may have looked abandoned: it can become done again later.
  void Reopen() { done_reported_ = false; }

 private:
  absl::Status NotTaking(absl::string_view what) const;

  // Constant after construction.
  const std::string job_;
  Roster& roster_;
  Sessions& sessions_;
  Generations& generations_;
  KvStore& kv_;
  Scheduler& scheduler_;
  const std::function<void(AbortCause)> on_abort_;
  const std::function<void()> on_done_;

  // Serialised by the job's lock.
  State state_ = State::kAttaching;
  std::string abort_reason_;                          // once kAborted
  std::shared_ptr<const DownMessage> abort_message_;  // once aborted
  bool detached_ = false;
  bool done_reported_ = false;
};

// "attaching", "running", "finished", "aborted".
const char* JobStateName(Lifecycle::State state);

}  // namespace troika::coordinator
