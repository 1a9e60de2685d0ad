#pragma once
// Supervisor: starts a job's local ranks through a ProcessLauncher, forwards their output
// line by line ("[rank] " prefix, optional; stdout to one sink, stderr to another), and
// watches them:
//   - the first rank that exits non-zero or is killed by a signal is reported at once
//     ("troikarun: rank 2 exited with code 1"); every other rank then gets SIGTERM (at once,
//     or `stop_delay` later if it has not exited on its own by then), and SIGKILL if it is
//     still running `grace_period` after SIGTERM;
//   - a signal read from `signal_fd` (SIGINT/SIGTERM sent to the launcher) is forwarded to
//     every running rank, with the same SIGKILL after `grace_period`; a second such signal
//     sends SIGKILL at once;
//   - Stop(), from any thread, stops the ranks the same way (the job was aborted elsewhere).
// Ranks that exit 0 are not a failure, whenever they exit. A process is named by its label
// ("rank 5"): by default its index, or options.labels (a node's global ranks).
//
// Thread contract: one thread calls Start() and then Run(); Run() blocks until every rank
// has exited and been reaped, and their output has been drained. The callbacks run on that
// thread. Stop() is thread-safe. See docs/agent.md for the lifecycle.

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/launch/line_forwarder.h"
#include "agent/launch/process_launcher.h"

namespace troika::agent {

struct SupervisorOptions {
  // Prefix of the supervisor's own messages on the error sink. Default "troikarun".
  std::string name = "troikarun";
  // How long ranks get between SIGTERM and SIGKILL. Default 5 s.
  absl::Duration grace_period = absl::Seconds(5);
  // After the first failure or a Stop(), how long ranks get to exit on their own (they may
  // have been told why elsewhere, e.g. by a coordinator's abort) before SIGTERM. Signals
  // from signal_fd are forwarded at once regardless. Default 0: SIGTERM at once.
  absl::Duration stop_delay = absl::ZeroDuration();
  // A signalfd(2) delivering the signals to forward to the ranks; -1 (default): none. Not owned.
  int signal_fd = -1;
  // Called once, when the first rank fails, before the other ranks are signalled (e.g. to
  // abort the job in an embedded coordinator with the reason; without stop_on_failure too).
  // Optional.
  // `rank` is the process's label.
  std::function<void(int rank, const ExitStatus& exit)> on_first_failure;
  // Called for every exit, first failure or not, after its output was forwarded. Optional.
  std::function<void(int rank, const ExitStatus& exit)> on_exit;
  // Labels of the processes, by index: their prefix and their name in messages. Empty
  // (default): 0 .. n-1. Otherwise one per process started.
  std::vector<int> labels;
  // Prefix every forwarded line with "[label] ". Default true; false passes lines through
  // as is (troikarun over agents, whose lines already carry a rank prefix).
  bool prefix_output = true;
  // What a process is called in messages: "rank 2 exited with code 1". Default "rank".
  std::string noun = "rank";
  // Stop the other ranks when one fails (the first bullet above). Default true; false (an
  // elastic job, which goes on without it): the failure is reported and recorded, and the
  // other ranks run on.
  bool stop_on_failure = true;
};

struct SupervisorResult {
  std::vector<ExitStatus> exits;  // by index
  std::vector<int> labels;        // by index (options.labels, or 0 .. n-1)
  std::string noun = "rank";      // options.noun
  int failed_rank = -1;           // index of the first process that failed; -1 if none failed first
  int signal = 0;                 // the first signal forwarded from signal_fd; 0 if none
  std::vector<int> killed_ranks;  // labels of the processes sent SIGKILL
  std::string stop_reason;        // Stop()'s reason, if Stop() stopped the processes first

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

  // Starts specs[i] as process i, in order. If one cannot be started, the processes already
  // started are killed and reaped, and the error is returned, naming the process by label.
  absl::Status Start(const std::vector<ProcessSpec>& specs);
  // Supervises until every rank has exited. Call once, after a successful Start().
  SupervisorResult Run();
  // Thread-safe, never blocks: asks Run() to stop every running process (SIGTERM, after
  // stop_delay unless they exit on their own, then SIGKILL after the grace period), reporting
  // `reason` ("the job was aborted"). No effect if the processes are already being stopped;
  // honoured at Run()'s start if called before.
  void Stop(const std::string& reason);

  // Restarting a process that exited (an elastic job's agent, --max_restarts): Hold(index),
  // from on_exit, keeps Run() going for it; Relaunch(index, spec), from any thread, starts it
  // again as process `index` (same label; its next exit is reported as any other); Release
  // (index), from any thread, gives up on it. A stop (Stop(), a signal, a failure that stops
  // the others) releases every held process.
  void Hold(int index);
  void Relaunch(int index, ProcessSpec spec);
  void Release(int index);
  // Adds a process while Run() supervises (troikarun's agent on a host that discovery added),
  // from any thread: Run() starts it as the returned index, labelled by that index (a
  // supervisor without options.labels), and supervises it as the others; one that cannot be
  // started exits at once, as a command not found does (127). -1, starting nothing, once
  // Run() has ended (every process had exited) or a Stop() came; one still pending when the
  // processes are being stopped is dropped.
  int Add(ProcessSpec spec);

 private:
  struct Rank;
  struct PollSet;

  void Loop();
  void BuildPollSet(PollSet& set) const;
  void ReapExited();
  void ReadOutput(Rank& rank, bool is_stderr, bool drain);
  void OnExit(int index, const ExitStatus& exit);
  void OnSignal();
  void OnStopRequest();
  // Starts the processes Relaunch() and Add() asked for; drops every hold once stopping.
  void StartRelaunches();
  // Wakes the poll loop (Stop, Relaunch, Release).
  void WakeLoop();
  // Processes running or held.
  bool Busy();
  bool Stopping() const;
  // SIGTERM now, or once stop_delay has passed.
  void BeginStop();
  // stop_delay has passed: SIGTERM to what still runs.
  void NoticeOver();
  int Label(int index) const;
  void TerminateAll(int signal);
  void KillStragglers(const std::string& reason);
  int RunningCount() const;
  void Report(const std::string& message);

  // Constant after construction.
  ProcessLauncher& launcher_;
  OutputSink& out_;
  OutputSink& err_;
  const SupervisorOptions options_;

  const int stop_fd_;  // an eventfd: Stop(), Relaunch() and Release() wake the poll loop

  std::mutex stop_mu_;
  std::string stop_reason_;  // guarded by stop_mu_; the first Stop()'s reason
  // Guarded by stop_mu_: held processes, and the specs to start them again with.
  std::set<int> held_;
  std::map<int, ProcessSpec> relaunches_;
  std::vector<ProcessSpec> additions_;  // Add()ed, not started yet
  bool closed_ = false;                 // Run() is ending: nothing is added any more
  int next_index_ = 0;                  // the index of the next Add()

  // Owned by the calling thread.
  std::vector<std::unique_ptr<Rank>> ranks_;
  SupervisorResult result_;
  std::optional<absl::Time> term_deadline_;  // set while stop_delay runs
  std::optional<absl::Time> kill_deadline_;  // set once the ranks have been sent SIGTERM
  int signals_received_ = 0;                 // read from signal_fd
};

}  // namespace troika::agent
