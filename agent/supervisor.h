#pragma once
// Supervisor: starts a job's local ranks through a ProcessLauncher, forwards their output
// line by line ("[rank] " prefix; stdout to one sink, stderr to another), and watches them:
//   - the first rank that exits non-zero or is killed by a signal is reported at once
//     ("troikarun: rank 2 exited with code 1"); every other rank then gets SIGTERM, and
//     SIGKILL if it is still running `grace_period` later;
//   - a signal read from `signal_fd` (SIGINT/SIGTERM sent to the launcher) is forwarded to
//     every running rank, with the same SIGKILL after `grace_period`; a second such signal
//     sends SIGKILL at once.
// Ranks that exit 0 are not a failure, whenever they exit.
//
// Thread contract: one thread calls Start() and then Run(); Run() blocks until every rank
// has exited and been reaped, and their output has been drained. The callback runs on that
// thread. See docs/agent.md for the lifecycle.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/line_forwarder.h"
#include "agent/process_launcher.h"

namespace troika::agent {

struct SupervisorOptions {
  // Prefix of the supervisor's own messages on the error sink. Default "troikarun".
  std::string name = "troikarun";
  // How long ranks get between SIGTERM and SIGKILL. Default 5 s.
  absl::Duration grace_period = absl::Seconds(5);
  // A signalfd(2) delivering the signals to forward to the ranks; -1 (default): none. Not owned.
  int signal_fd = -1;
  // Called once, when the first rank fails, before the other ranks are signalled (e.g. to
  // abort the job in an embedded coordinator with the reason). Optional.
  std::function<void(int rank, const ExitStatus& exit)> on_first_failure;
};

struct SupervisorResult {
  std::vector<ExitStatus> exits;  // by rank
  int failed_rank = -1;           // the first rank that failed; -1 if none failed first
  int signal = 0;                 // the first signal forwarded from signal_fd; 0 if none
  std::vector<int> killed_ranks;  // ranks sent SIGKILL (grace period over, or a 2nd signal)

  // 0 when every rank exited 0. Otherwise whichever came first: 128 + `signal` when the
  // launcher was signalled, or the first failed rank's ShellCode() (its exit code, or
  // 128 + the signal that killed it).
  int ExitCode() const;
  // One line naming the cause, for a non-zero ExitCode(): "rank 2 exited with code 1".
  std::string Summary() const;
};

class Supervisor {
 public:
  // `launcher`, `out` and `err` must outlive the supervisor.
  Supervisor(ProcessLauncher& launcher, OutputSink& out, OutputSink& err,
             SupervisorOptions options);
  ~Supervisor();  // kills and reaps ranks still running (only if Run() was not called)
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts specs[r] as rank r, in rank order. If one cannot be started, the ranks already
  // started are killed and reaped, and the error is returned, naming the rank.
  absl::Status Start(const std::vector<ProcessSpec>& specs);
  // Supervises until every rank has exited. Call once, after a successful Start().
  SupervisorResult Run();

 private:
  struct Rank;
  struct PollSet;

  void Loop();
  void BuildPollSet(PollSet& set) const;
  void ReapExited();
  void ReadOutput(Rank& rank, bool is_stderr, bool drain);
  void OnExit(int index, const ExitStatus& exit);
  void OnSignal();
  void TerminateAll(int signal);
  void KillStragglers(const std::string& reason);
  int RunningCount() const;
  void Report(const std::string& message);

  // Constant after construction.
  ProcessLauncher& launcher_;
  OutputSink& out_;
  OutputSink& err_;
  const SupervisorOptions options_;

  // Owned by the calling thread.
  std::vector<std::unique_ptr<Rank>> ranks_;
  SupervisorResult result_;
  std::optional<absl::Time> kill_deadline_;  // set once the ranks have been sent SIGTERM
};

}  // namespace troika::agent
