#include "libclient/execution/executor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/thread_name.h"

namespace troika::internal {

Executor::Executor(TensorTable& table, transport::Communicator& comm, ProcessSetTable& sets,
                   ConnectFn connect, OutputPool& outputs, ExecStats& stats, StepClock& steps,
                   DevicePlane* device, std::function<absl::Status(absl::Status)> on_failure)
    : table_(table),
      comm_(comm),
      sets_(sets),
      connect_(std::move(connect)),
      stats_(stats),
      steps_(steps),
      device_(device),
      on_failure_(std::move(on_failure)),
      runner_(outputs) {}

Executor::~Executor() { Stop(); }

void Executor::Start() {
  thread_ = std::thread([this] {
    NameThisThread("troika-execute");
    Loop();
  });
}

void Executor::Enqueue(std::vector<Response> responses) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_ || stopping_) return;
    const absl::Time now = Arrival();
    for (Response& r : responses) {
      queue_.push_back({std::make_shared<const Response>(std::move(r)), now});
    }
    turn_.Queued(!queue_.empty());
  }
  cv_.notify_one();
}

void Executor::EnqueueScheduled(int64_t schedule, ScheduledStep step, bool wake) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_ || stopping_) return;
    queue_.push_back(
        {std::move(step.response), Arrival(), schedule, step.position, step.vote_void});
    turn_.Queued(true);
  }
  if (wake) cv_.notify_one();
}

absl::Time Executor::Arrival() const {
  return stats_.phases_on() ? absl::Now() : absl::InfinitePast();
}

void Executor::RunInline(const std::function<bool()>& done) {
  std::unique_lock<std::mutex> lock(mu_);
  // Only scheduled host allreduces (set 0); a GPU launch (the device plane's calls stay on
  // one thread, whose current device it sets) or a process set's connection stays on the
  // executor thread.
  auto claimable = [&] {
    return !turn_.held() && !queue_.empty() && queue_.front().schedule != 0 &&  // empty if aborted
           queue_.front().response->device != DeviceClass::kGpu;
  };
  while (claimable()) {
    lock.unlock();
    const bool finished = done();  // takes the operation's lock: never under mu_
    lock.lock();
    if (finished || !claimable()) break;
    Queued queued = std::move(queue_.front());
    queue_.pop_front();
    turn_.TakeQueued(!queue_.empty());
    lock.unlock();
    Run(queued);
    lock.lock();
    turn_.Give();  // under mu_: whether to wake the executor thread is decided below
  }
  // Left queued, or stopping while this thread held the turn: the executor thread's now.
  const bool wake = turn_.Runnable();
  lock.unlock();
  if (wake) cv_.notify_one();
}

bool Executor::TryClaim() { return turn_.TryTake(); }

void Executor::RunClaimed(int64_t schedule, ScheduledStep step, absl::Span<Entry> entries,
                          const AdoptFn& adopt) {
  Run({std::move(step.response), Arrival(), schedule, step.position, step.vote_void}, entries,
      &adopt);
  // Queued meanwhile, or closing: the executor thread, which may be about to wait (its
  // condition read with the turn still held), is woken under the lock.
  if (turn_.Give()) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_one();
  }
}

void Executor::Abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    queue_.clear();
    turn_.Queued(false);
    turn_.Close();
  }
  comm_.Abort();
  sets_.AbortAll();
  if (device_ != nullptr) device_->Abort();
  cv_.notify_one();
}

void Executor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    turn_.Close();
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  if (device_ != nullptr) device_->Stop();
}

void Executor::Loop() {
  for (;;) {
    Queued queued;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // A thread running entries itself (RunInline) holds the turn until it is done.
      cv_.wait(lock, [&] { return turn_.Runnable(); });
      if (aborted_ || queue_.empty()) return;
      queued = std::move(queue_.front());
      queue_.pop_front();
      turn_.TakeQueued(!queue_.empty());
    }
    Run(queued);
    std::lock_guard<std::mutex> lock(mu_);
    turn_.Give();
  }
}

void Executor::Run(const Queued& queued, absl::Span<Entry> entries, const AdoptFn* adopt) {
  // After a void entry the schedule's later entries are negotiated again: nothing to run or
  // record.
  if (queued.schedule != 0 && queued.schedule == ended_schedule_) {
    // A claimed run's schedule is in force: the controller learns of an end (Scheduled)
    // before the turn that ran the void entry is given back.
    TROIKA_CHECK(entries.empty()) << "Executor: a claimed entry of an ended schedule";
    return;
  }
  // Phases are timed only while they are reported (a timeline is being written).
  const bool timed = stats_.phases_on();
  const absl::Time start = timed ? absl::Now() : absl::InfinitePast();
  runner_.ResetMarks(timed);
  steps_.ExecBegin();
  if (queued.schedule != 0) {
    ExecuteScheduled(queued, entries, adopt);
  } else {
    Execute(*queued.response);
  }
  steps_.ExecEnd();
  Record(queued, start);
}

void Executor::Record(const Queued& queued, absl::Time start) {
  const CollectiveRunner::Marks& marks = runner_.marks();
  stats_.AddAllreduceBytes(marks.allreduce_bytes);
  if (start == absl::InfinitePast() || queued.response->is_error()) return;
  const absl::Time end = absl::Now();
  // Ops without a fusion buffer spend all their time in the collective.
  const absl::Time copied_in = marks.copied_in == absl::InfinitePast() ? start : marks.copied_in;
  const absl::Time reduced = marks.reduced == absl::InfinitePast() ? end : marks.reduced;
  const std::vector<std::string>& names = queued.response->names;
  if (queued.arrived != absl::InfinitePast()) {
    stats_.AddPhase({PhaseKind::kQueue, queued.arrived, start, names});
  }
  if (copied_in > start) stats_.AddPhase({PhaseKind::kCopyIn, start, copied_in, names});
  stats_.AddPhase({PhaseKind::kCollective, copied_in, reduced, names});
  if (end > reduced) stats_.AddPhase({PhaseKind::kCopyOut, reduced, end, names});
}

void Executor::Execute(const Response& response) {
  if (response.is_error()) {
    // Names this rank never submitted (a departed rank's errors) are simply not here.
    for (const std::string& name : response.names) {
      if (auto entry = table_.Take(response.process_set, name)) {
        entry->state->Complete(absl::FailedPreconditionError(response.error));
      }
    }
    return;
  }
  transport::Communicator* comm = &comm_;
  if (response.process_set != 0) {
    comm = sets_.communicator(response.process_set);
    if (comm == nullptr) return;  // not a member: every rank gets every set's responses
  }
  std::vector<Entry> entries;
  entries.reserve(response.names.size());
  const bool joined = std::find(response.joined_ranks.begin(), response.joined_ranks.end(),
                                comm_.rank()) != response.joined_ranks.end();
  for (size_t i = 0; i < response.names.size(); ++i) {
    const std::string& name = response.names[i];
    std::optional<Entry> entry = table_.Take(response.process_set, name);
    if (!entry && joined) {
      entries.push_back(JoinedStandIn(response, i));
      continue;
    }
    if (!entry) {
      // Every rank submitted it, so it is ours unless the table was closed under us.
      absl::Status closed = table_.status();
      for (Entry& e : entries) {
        if (e.state) e.state->Complete(closed);
      }
      if (closed.ok()) {
        on_failure_(absl::InternalError(absl::StrCat("the coordinator scheduled '", name,
                                                     "', which this rank has not submitted")))
            .IgnoreError();  // the context fails; nothing here is waiting for the status
      }
      return;
    }
    entries.push_back(std::move(*entry));
  }
  if (response.device == DeviceClass::kGpu) {
    absl::Status status = LaunchOnDevice(response, entries);
    if (status.ok()) return;  // the device plane completes the states
    status = on_failure_(status);
    for (Entry& e : entries) {
      if (e.state) e.state->Complete(status);
    }
    return;
  }
  absl::Status status = runner_.Run(*comm, response, absl::MakeSpan(entries));
  if (status.ok() && response.process_set == 0 && response.type == CollectiveType::kBarrier &&
      entries.size() == 1) {
    status = ApplyProcessSetControl(response, entries[0]);
  }
  if (!status.ok()) status = on_failure_(status);
  for (Entry& e : entries) {
    // A collective that succeeded may still have failed this rank's own part (e.outcome).
    if (e.state) e.state->Complete(status.ok() ? e.outcome : status);
  }
}

void Executor::ExecuteScheduled(const Queued& queued, absl::Span<Entry> given,
                                const AdoptFn* adopt) {
  const Response& response = *queued.response;
  // A GPU entry votes on the host before it is issued: a vote in the device buffer could be
  // read only after waiting for the device. A void vote moves no data, so a rank that
  // deviated needs no stand-ins.
  const bool on_device = response.device == DeviceClass::kGpu;
  std::vector<Entry> taken;
  if (given.empty()) {
    taken.reserve(response.names.size());
    for (size_t i = 0; i < response.names.size(); ++i) {
      if (queued.vote_void) {
        // This rank deviated: it takes part with zeros (a GPU entry: it only votes); its
        // tensors stay in the table.
        if (!on_device) taken.push_back(JoinedStandIn(response, i));
        continue;
      }
      std::optional<Entry> entry = table_.Take(0, response.names[i]);
      if (!entry) {
        // Submitted (the schedule counted it), so the table was closed under us.
        absl::Status closed = table_.status();
        for (Entry& e : taken) e.state->Complete(closed);
        return;
      }
      taken.push_back(std::move(*entry));
    }
  }
  const absl::Span<Entry> entries = given.empty() ? absl::MakeSpan(taken) : given;
  CollectiveRunner::Vote vote =
      queued.vote_void ? CollectiveRunner::Vote::kVoid : CollectiveRunner::Vote::kGo;
  absl::Status status = on_device ? CollectiveRunner::CombineVotes(comm_, &vote)
                                  : runner_.Run(comm_, response, entries, &vote);
  if (status.ok() && on_device && vote == CollectiveRunner::Vote::kGo) {
    // (GPU entries are never given: RunClaimed runs host entries only.)
    status = LaunchOnDevice(response, taken);  // the device plane completes the states
  }
  if (!status.ok()) {
    status = on_failure_(status);
    for (Entry& e : entries) {
      if (e.state) e.state->Complete(status);
      e.outcome = status;  // a given entry's result (RunClaimed)
    }
    return;
  }
  if (vote == CollectiveRunner::Vote::kVoid) {
    ended_schedule_ = queued.schedule;
    for (Entry& e : entries) {
      if (!e.state && adopt != nullptr) e.state = (*adopt)(e);  // a given entry
      if (!e.state) continue;                                   // a stand-in
      std::shared_ptr<OpState> state = e.state;
      // Back to be negotiated; a table closed meanwhile fails it instead.
      if (absl::Status s = table_.Insert(std::move(e)); !s.ok()) state->Complete(s);
    }
  } else if (!on_device) {
    for (Entry& e : entries) {
      if (e.state) e.state->Complete(e.outcome);  // a given entry's is its outcome
    }
  }
  if (on_scheduled_)
    on_scheduled_(queued.schedule, queued.position, vote == CollectiveRunner::Vote::kGo);
}

absl::Status Executor::LaunchOnDevice(const Response& response, std::vector<Entry>& entries) {
  if (device_ == nullptr) {
    return absl::InternalError(
        "the coordinator scheduled a GPU operation on a rank without GPU "
        "support");
  }
  DeviceGroup group{0, comm_.rank(), comm_.size()};
  if (response.process_set != 0) {
    absl::StatusOr<std::pair<int, int>> member = sets_.Member(response.process_set);
    if (!member.ok()) return member.status();
    group = {response.process_set, member->first, member->second};
  }
  return device_->Launch(response, group, entries);
}

absl::Status Executor::ApplyProcessSetControl(const Response& response, Entry& entry) {
  const std::string& name = response.names[0];
  const int id = response.root;
  if (absl::StartsWith(name, kRemoveProcessSetPrefix)) {
    sets_.Remove(id);
    if (device_ != nullptr) device_->DropGroup(id);
    return absl::OkStatus();
  }
  if (!absl::StartsWith(name, kAddProcessSetPrefix)) return absl::OkStatus();
  // Every rank passed the same ranks (the coordinator checked); every member connects here,
  // at the same point of the stream, so the connection cannot wait on a set-0 collective.
  const std::vector<int>& ranks = entry.request.process_set_ranks;
  auto it = std::find(ranks.begin(), ranks.end(), comm_.rank());
  std::unique_ptr<transport::Communicator> comm;
  if (it != ranks.end()) {
    auto connected =
        connect_(id, static_cast<int>(it - ranks.begin()), static_cast<int>(ranks.size()));
    if (!connected.ok()) {
      return absl::Status(
          connected.status().code(),
          absl::StrCat("connecting process set ", id, ": ", connected.status().message()));
    }
    comm = *std::move(connected);
  }
  sets_.Add(id, ranks, std::move(comm));
  if (entry.state) entry.state->process_set_id = id;
  return absl::OkStatus();
}

Entry Executor::JoinedStandIn(const Response& response, size_t i) {
  Entry e;  // no input: zeros; no output, no state: the result is discarded
  e.request.name = response.names[i];
  e.request.type = response.type;
  e.request.dtype = response.dtype;
  e.request.shape = {i < response.elements.size() ? response.elements[i] : 0};
  return e;
}

}  // namespace troika::internal
