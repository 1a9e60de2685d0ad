#include "agent/launch/supervisor.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troika::agent {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
// After a rank exits, at most this many chunks are drained from each of its pipes: enough for
// anything the rank itself wrote (a pipe holds 64 KiB to 1 MiB), bounded in case a process it
// left behind keeps writing.
constexpr int kMaxDrainReads = 16;
// Without pidfds, exits are noticed by polling this often.
constexpr int kReapPollMs = 50;

int MillisUntil(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))));
}

// -1 means "no timeout" for poll(2).
int MinTimeout(int a, int b) {
  if (a < 0) return b;
  if (b < 0) return a;
  return std::min(a, b);
}

// A process that could not be started: it has "exited" with `exit`, and has no output.
class NeverStarted : public Process {
 public:
  explicit NeverStarted(ExitStatus exit) : exit_(exit) {}
  int pid() const override { return -1; }
  int stdout_fd() const override { return -1; }
  int stderr_fd() const override { return -1; }
  int exit_fd() const override { return -1; }
  std::optional<ExitStatus> TryReap() override { return exit_; }
  ExitStatus Wait() override { return exit_; }
  void Signal(int) override {}

 private:
  const ExitStatus exit_;
};

}  // namespace

struct Supervisor::Rank {
  Rank(const std::string& prefix, std::unique_ptr<Process> p, OutputSink& out, OutputSink& err)
      : process(std::move(p)), stdout_lines(prefix, out), stderr_lines(prefix, err) {}

  std::unique_ptr<Process> process;
  LineForwarder stdout_lines;
  LineForwarder stderr_lines;
  bool stdout_open = true;
  bool stderr_open = true;
  std::optional<ExitStatus> exit;
};

int SupervisorResult::ExitCode() const {
  if (signal != 0) return 128 + signal;
  if (failed_rank >= 0) return exits[failed_rank].ShellCode();
  for (const ExitStatus& exit : exits) {
    if (!exit.ok()) return exit.ShellCode();
  }
  return 0;
}

std::string SupervisorResult::Summary() const {
  std::string summary;
  if (signal != 0) {
    summary = absl::StrCat("stopped by ", SignalDescription(signal));
  } else if (failed_rank >= 0) {
    summary = absl::StrCat(noun, " ", labels[failed_rank], " ", exits[failed_rank].ToString());
  } else if (ExitCode() == 0) {
    return absl::StrCat("every ", noun, " exited with code 0");
  } else if (!stop_reason.empty()) {
    summary = absl::StrCat("stopped: ", stop_reason);
  }
  if (!killed_ranks.empty()) {
    absl::StrAppend(&summary, "; sent SIGKILL to ", noun, killed_ranks.size() > 1 ? "s " : " ",
                    absl::StrJoin(killed_ranks, ", "));
  }
  return summary;
}

Supervisor::Supervisor(ProcessLauncher& launcher, OutputSink& out, OutputSink& err,
                       SupervisorOptions options)
    : launcher_(launcher),
      out_(out),
      err_(err),
      options_(std::move(options)),
      stop_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

Supervisor::~Supervisor() {
  ranks_.clear();  // kills and reaps what still runs
  if (stop_fd_ >= 0) close(stop_fd_);
}

int Supervisor::Label(int index) const {
  return options_.labels.empty() ? index : options_.labels[index];
}

absl::Status Supervisor::Start(const std::vector<ProcessSpec>& specs) {
  if (specs.empty())
    return absl::InvalidArgumentError(absl::StrCat("no ", options_.noun, "s to start"));
  if (!options_.labels.empty() && options_.labels.size() != specs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(specs.size(), " processes but ", options_.labels.size(), " labels"));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const int label = Label(static_cast<int>(i));
    absl::StatusOr<std::unique_ptr<Process>> process = launcher_.Launch(specs[i]);
    if (!process.ok()) {
      ranks_.clear();  // kills and reaps the ranks already started
      return absl::Status(process.status().code(), absl::StrCat(options_.noun, " ", label, ": ",
                                                                process.status().message()));
    }
    const std::string prefix = options_.prefix_output ? absl::StrCat("[", label, "] ") : "";
    ranks_.push_back(std::make_unique<Rank>(prefix, *std::move(process), out_, err_));
    result_.labels.push_back(label);
  }
  result_.exits.assign(specs.size(), ExitStatus{});
  result_.noun = options_.noun;
  std::lock_guard<std::mutex> lock(stop_mu_);
  next_index_ = static_cast<int>(specs.size());
  return absl::OkStatus();
}

void Supervisor::Hold(int index) {
  std::lock_guard<std::mutex> lock(stop_mu_);
  held_.insert(index);
}

void Supervisor::Relaunch(int index, ProcessSpec spec) {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (!held_.count(index)) return;
    relaunches_[index] = std::move(spec);
  }
  WakeLoop();
}

void Supervisor::Release(int index) {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    held_.erase(index);
    relaunches_.erase(index);
  }
  WakeLoop();
}

int Supervisor::Add(ProcessSpec spec) {
  int index;
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (closed_ || !stop_reason_.empty() || !options_.labels.empty()) return -1;
    index = next_index_++;
    additions_.push_back(std::move(spec));
  }
  WakeLoop();
  return index;
}

void Supervisor::WakeLoop() {
  const uint64_t one = 1;
  if (write(stop_fd_, &one, sizeof(one)) < 0) {
    // Only EAGAIN (counter full) is possible, and then a wake-up is pending anyway.
  }
}

bool Supervisor::Busy() {
  if (RunningCount() > 0) return true;
  std::lock_guard<std::mutex> lock(stop_mu_);
  closed_ = held_.empty() && additions_.empty();
  return !closed_;
}

void Supervisor::StartRelaunches() {
  std::map<int, ProcessSpec> relaunches;
  std::vector<ProcessSpec> additions;
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (Stopping() || !stop_reason_.empty()) {
      held_.clear();
      relaunches_.clear();
      additions_.clear();
      return;
    }
    relaunches.swap(relaunches_);
    additions.swap(additions_);
    for (const auto& [index, spec] : relaunches) held_.erase(index);
  }
  for (ProcessSpec& spec : additions) {
    const int index = static_cast<int>(ranks_.size());  // Add()'s index: each gets a Rank
    const std::string prefix = options_.prefix_output ? absl::StrCat("[", index, "] ") : "";
    absl::StatusOr<std::unique_ptr<Process>> process = launcher_.Launch(spec);
    if (!process.ok()) {
      Report(absl::StrCat("cannot start ", options_.noun, " ", index, ": ",
                          process.status().message()));
      ranks_.push_back(std::make_unique<Rank>(
          prefix, std::make_unique<NeverStarted>(ExitStatus{127, 0}), out_, err_));
      ranks_.back()->stdout_open = ranks_.back()->stderr_open = false;
    } else {
      ranks_.push_back(std::make_unique<Rank>(prefix, *std::move(process), out_, err_));
    }
    result_.labels.push_back(index);
    result_.exits.push_back(ExitStatus{});
  }
  for (auto& [index, spec] : relaunches) {
    const int label = Label(index);
    absl::StatusOr<std::unique_ptr<Process>> process = launcher_.Launch(spec);
    if (!process.ok()) {
      Report(absl::StrCat("cannot start ", options_.noun, " ", label,
                          " again: ", process.status().message()));
      continue;
    }
    const std::string prefix = options_.prefix_output ? absl::StrCat("[", label, "] ") : "";
    ranks_[index] = std::make_unique<Rank>(prefix, *std::move(process), out_, err_);
  }
}

void Supervisor::Stop(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (!stop_reason_.empty()) return;
    stop_reason_ = reason.empty() ? "stop requested" : reason;
  }
  WakeLoop();
}

SupervisorResult Supervisor::Run() {
  Loop();
  return result_;
}

// The descriptors one poll(2) call waits on, and what each one belongs to.
struct Supervisor::PollSet {
  enum Source { kStdout, kStderr, kExit, kSignal, kStop };
  void Add(int fd, int rank, Source source) {
    fds.push_back({fd, POLLIN, 0});
    owners.push_back({rank, source});
  }
  std::vector<pollfd> fds;
  std::vector<std::pair<int, Source>> owners;  // (rank index, or -1 for the signal fd)
  int timeout_ms = -1;                         // -1: none
};

void Supervisor::Loop() {
  PollSet set;
  while (Busy()) {
    BuildPollSet(set);
    int ready = poll(set.fds.data(), set.fds.size(), set.timeout_ms);
    if (ready < 0 && errno != EINTR) {
      Report(absl::StrCat("poll failed: ", strerrordesc_np(errno), "; killing the ranks"));
      TerminateAll(SIGKILL);
      for (auto& rank : ranks_) rank->process->Wait();
    }
    for (size_t k = 0; ready > 0 && k < set.fds.size(); ++k) {
      if (set.fds[k].revents == 0) continue;
      auto [index, source] = set.owners[k];
      if (source == PollSet::kSignal) OnSignal();
      if (source == PollSet::kStop) OnStopRequest();
      if (source == PollSet::kStdout || source == PollSet::kStderr) {
        ReadOutput(*ranks_[index], source == PollSet::kStderr, /*drain=*/false);
      }
    }
    ReapExited();
    StartRelaunches();
    if (term_deadline_.has_value() && absl::Now() >= *term_deadline_) {
      term_deadline_.reset();
      NoticeOver();
    }
    if (kill_deadline_.has_value() && absl::Now() >= *kill_deadline_) {
      KillStragglers(absl::StrCat("still running ", absl::FormatDuration(options_.grace_period),
                                  " after being signalled"));
    }
  }
}

void Supervisor::BuildPollSet(PollSet& set) const {
  set.fds.clear();
  set.owners.clear();
  set.timeout_ms = -1;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const Rank& rank = *ranks_[i];
    if (rank.exit.has_value()) continue;
    const int index = static_cast<int>(i);
    if (rank.stdout_open) set.Add(rank.process->stdout_fd(), index, PollSet::kStdout);
    if (rank.stderr_open) set.Add(rank.process->stderr_fd(), index, PollSet::kStderr);
    if (rank.process->exit_fd() >= 0) {
      set.Add(rank.process->exit_fd(), index, PollSet::kExit);
    } else {
      set.timeout_ms = kReapPollMs;
    }
  }
  if (options_.signal_fd >= 0) set.Add(options_.signal_fd, -1, PollSet::kSignal);
  if (stop_fd_ >= 0) set.Add(stop_fd_, -1, PollSet::kStop);
  if (term_deadline_.has_value()) {
    set.timeout_ms = MinTimeout(set.timeout_ms, MillisUntil(*term_deadline_));
  }
  if (kill_deadline_.has_value()) {
    set.timeout_ms = MinTimeout(set.timeout_ms, MillisUntil(*kill_deadline_));
  }
}

void Supervisor::ReapExited() {
  // Checking every running rank (not only those whose exit fd fired) also covers kernels
  // without pidfds; a WNOHANG waitpid per rank is cheap.
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& rank = *ranks_[i];
    if (rank.exit.has_value()) continue;
    std::optional<ExitStatus> exit = rank.process->TryReap();
    if (!exit.has_value()) continue;
    // Whatever the rank wrote before exiting is forwarded before its exit is reported.
    ReadOutput(rank, /*is_stderr=*/false, /*drain=*/true);
    ReadOutput(rank, /*is_stderr=*/true, /*drain=*/true);
    rank.exit = exit;
    OnExit(static_cast<int>(i), *exit);
  }
}

void Supervisor::ReadOutput(Rank& rank, bool is_stderr, bool drain) {
  bool& open = is_stderr ? rank.stderr_open : rank.stdout_open;
  LineForwarder& lines = is_stderr ? rank.stderr_lines : rank.stdout_lines;
  const int fd = is_stderr ? rank.process->stderr_fd() : rank.process->stdout_fd();
  char buffer[kReadChunk];
  // One read per wake-up keeps a chatty rank from starving the others.
  for (int reads = 0; open && reads < (drain ? kMaxDrainReads : 1); ++reads) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      lines.Feed(std::string_view(buffer, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    open = false;  // end of file, or an error that will not go away
  }
  // An exited rank's pipes are not watched any longer (a process it left behind may hold
  // them open): its unfinished last line is flushed now.
  if (!open || drain) {
    lines.Finish();
    open = false;
  }
}

void Supervisor::OnExit(int index, const ExitStatus& exit) {
  result_.exits[index] = exit;
  if (options_.on_exit) options_.on_exit(Label(index), exit);
  if (exit.ok() || Stopping()) return;  // success, or a consequence of a stop
  if (!options_.stop_on_failure) {
    const bool first = result_.failed_rank < 0;
    if (first) result_.failed_rank = index;
    Report(absl::StrCat(options_.noun, " ", Label(index), " ", exit.ToString()));
    if (first && options_.on_first_failure) options_.on_first_failure(Label(index), exit);
    return;
  }
  result_.failed_rank = index;
  const int others = RunningCount();
  Report(absl::StrCat(options_.noun, " ", Label(index), " ", exit.ToString(),
                      others > 0 ? absl::StrCat("; stopping the other ", others, " running ",
                                                options_.noun, others > 1 ? "s" : "")
                                 : ""));
  if (options_.on_first_failure) options_.on_first_failure(Label(index), exit);
  BeginStop();
}

void Supervisor::OnSignal() {
  signalfd_siginfo info;
  ssize_t n = read(options_.signal_fd, &info, sizeof(info));
  if (n != static_cast<ssize_t>(sizeof(info))) return;
  const int signal = static_cast<int>(info.ssi_signo);
  if (signals_received_++ > 0) {
    KillStragglers(absl::StrCat("received ", SignalDescription(signal), " while stopping"));
    return;
  }
  const int running = RunningCount();
  const std::string what =
      absl::StrCat(running, " running ", options_.noun, running == 1 ? "" : "s");
  if (Stopping()) {
    // Already stopping for another cause, which stays the cause; the signal still reaches
    // the processes at once, and a second one kills them.
    Report(absl::StrCat("received ", SignalDescription(signal),
                        " while stopping; forwarding it to ", what));
    term_deadline_.reset();
    TerminateAll(signal);
    return;
  }
  result_.signal = signal;
  Report(absl::StrCat("received ", SignalDescription(signal), "; forwarding it to ", what));
  TerminateAll(signal);
}

void Supervisor::OnStopRequest() {
  uint64_t count;
  if (read(stop_fd_, &count, sizeof(count)) < 0) return;
  if (Stopping()) return;
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    reason = stop_reason_;
  }
  if (reason.empty()) return;  // a Relaunch or Release woke the loop
  result_.stop_reason = reason;
  const int running = RunningCount();
  if (running > 0) {
    Report(absl::StrCat(reason, "; stopping ", running, " running ", options_.noun,
                        running > 1 ? "s" : ""));
  }
  BeginStop();
}

bool Supervisor::Stopping() const {
  return term_deadline_.has_value() || kill_deadline_.has_value();
}

void Supervisor::BeginStop() {
  if (options_.stop_delay <= absl::ZeroDuration()) {
    TerminateAll(SIGTERM);
  } else {
    term_deadline_ = absl::Now() + options_.stop_delay;
  }
}

void Supervisor::NoticeOver() {
  std::vector<int> running;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (!ranks_[i]->exit.has_value()) running.push_back(Label(static_cast<int>(i)));
  }
  if (!running.empty()) {
    Report(absl::StrCat("sent SIGTERM to ", options_.noun, running.size() > 1 ? "s " : " ",
                        absl::StrJoin(running, ", "), " (still running ",
                        absl::FormatDuration(options_.stop_delay), " after being told to stop)"));
  }
  TerminateAll(SIGTERM);
}

void Supervisor::TerminateAll(int signal) {
  for (auto& rank : ranks_) {
    if (!rank->exit.has_value()) rank->process->Signal(signal);
  }
  if (!kill_deadline_.has_value()) kill_deadline_ = absl::Now() + options_.grace_period;
}

void Supervisor::KillStragglers(const std::string& reason) {
  std::vector<int> killed;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (ranks_[i]->exit.has_value()) continue;
    ranks_[i]->process->Signal(SIGKILL);
    killed.push_back(Label(static_cast<int>(i)));
  }
  kill_deadline_ = absl::InfiniteFuture();  // never again
  if (killed.empty()) return;
  result_.killed_ranks.insert(result_.killed_ranks.end(), killed.begin(), killed.end());
  Report(absl::StrCat("sent SIGKILL to ", options_.noun, killed.size() > 1 ? "s " : " ",
                      absl::StrJoin(killed, ", "), " (", reason, ")"));
}

int Supervisor::RunningCount() const {
  return static_cast<int>(std::count_if(ranks_.begin(), ranks_.end(),
                                        [](const auto& rank) { return !rank->exit.has_value(); }));
}

void Supervisor::Report(const std::string& message) {
  err_.Write(absl::StrCat(options_.name, ": ", message, "\n"));
}

}  // namespace troika::agent
