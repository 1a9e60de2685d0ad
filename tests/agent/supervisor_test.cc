// Supervisor over real processes (/bin/sh), started by PosixProcessLauncher.

#include "agent/launch/supervisor.h"

#include <errno.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "agent/launch/posix_process_launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/memory_sink.h"

namespace troika::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// One `sh -c script` per rank, with RANK set.
std::vector<ProcessSpec> ShellRanks(int n, const std::string& script) {
  std::vector<ProcessSpec> specs;
  for (int rank = 0; rank < n; ++rank) {
    specs.push_back(
        {{"/bin/sh", "-c", script}, {"PATH=/usr/bin:/bin", "RANK=" + std::to_string(rank)}});
  }
  return specs;
}

bool ProcessGone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

class SupervisorTest : public ::testing::Test {
 protected:
  SupervisorTest() {
    std::string pattern = ::testing::TempDir() + "/supervisor_test-XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) dir_ = pattern;
  }
  void SetUp() override { ASSERT_FALSE(dir_.empty()) << "mkdtemp"; }
  ~SupervisorTest() override {
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }

  // A file a callback creates when something has happened, and the shell words that wait
  // for it: the ranks wait on the event, never on a guess of how long it takes.
  std::string Marker(const std::string& name) const { return dir_ + "/" + name; }
  static void Touch(const std::string& path) { std::ofstream(path).put('\n'); }
  static std::string WaitFor(const std::string& path) {
    return absl::StrCat("while [ ! -e '", path, "' ]; do sleep 0.01; done; ");
  }

  SupervisorResult RunRanks(int n, const std::string& script, SupervisorOptions options = {}) {
    Supervisor supervisor(launcher_, out_, err_, std::move(options));
    absl::Status started = supervisor.Start(ShellRanks(n, script));
    EXPECT_TRUE(started.ok()) << started;
    return supervisor.Run();
  }

  std::string dir_;
  PosixProcessLauncher launcher_;
  MemorySink out_;
  MemorySink err_;
};

TEST_F(SupervisorTest, ForwardsOutputWithRankPrefixesAndSucceeds) {
  // Rank 1 writes once rank 0's exit was seen (after its output was forwarded), so the
  // ranks' lines come in one order.
  SupervisorOptions options;
  options.on_exit = [&](int rank, const ExitStatus&) {
    if (rank == 0) Touch(Marker("rank0-exited"));
  };
  SupervisorResult result = RunRanks(2,
                                     "if [ $RANK = 1 ]; then " + WaitFor(Marker("rank0-exited")) +
                                         "fi; echo out $RANK; echo err $RANK >&2; printf 'tail %s' "
                                         "$RANK",
                                     options);
  EXPECT_EQ(result.ExitCode(), 0);
  EXPECT_EQ(result.failed_rank, -1);
  EXPECT_EQ(out_.text(), "[0] out 0\n[0] tail 0\n[1] out 1\n[1] tail 1\n");
  EXPECT_EQ(err_.text(), "[0] err 0\n[1] err 1\n");
}

TEST_F(SupervisorTest, FailingRankIsReportedAndStopsTheOthers) {
  SupervisorOptions options;
  options.grace_period = absl::Seconds(120);  // far beyond the bound below, however slow
  const absl::Time start = absl::Now();
  SupervisorResult result = RunRanks(
      3, "if [ $RANK = 1 ]; then echo bye >&2; sleep 0.2; exit 3; fi; exec sleep 1000", options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(60)) << "SIGTERM, not the grace period, ends them";
  EXPECT_EQ(result.failed_rank, 1);
  EXPECT_EQ(result.ExitCode(), 3);
  EXPECT_EQ(result.exits[0].signal, SIGTERM);
  EXPECT_EQ(result.exits[2].signal, SIGTERM);
  EXPECT_TRUE(result.killed_ranks.empty());
  EXPECT_EQ(result.Summary(), "rank 1 exited with code 3");
  EXPECT_EQ(err_.text(),
            "[1] bye\ntroikarun: rank 1 exited with code 3; stopping the other 2 running ranks\n");
}

TEST_F(SupervisorTest, WithoutStopOnFailureAFailureIsReportedAndTheOthersRunOn) {
  SupervisorOptions options;
  options.stop_on_failure = false;  // an elastic job's agent
  std::vector<int> first_failures;
  options.on_first_failure = [&](int rank, const ExitStatus&) { first_failures.push_back(rank); };
  SupervisorResult result =
      RunRanks(3, "if [ $RANK = 1 ]; then exit 3; fi; sleep 0.5; echo still here $RANK", options);
  EXPECT_EQ(result.failed_rank, 1);
  EXPECT_EQ(result.exits[0].code, 0);
  EXPECT_EQ(result.exits[2].code, 0);
  EXPECT_THAT(out_.text(), HasSubstr("[0] still here 0\n"));  // in either order
  EXPECT_THAT(out_.text(), HasSubstr("[2] still here 2\n"));
  EXPECT_EQ(err_.text(), "troikarun: rank 1 exited with code 3\n");
  EXPECT_EQ(first_failures, std::vector<int>{1});
}

TEST_F(SupervisorTest, AHeldRankRunsAgainWhenRelaunchedAndRunWaitsForIt) {
  SupervisorOptions options;
  options.stop_on_failure = false;
  Supervisor* self = nullptr;
  std::thread relauncher;
  options.on_exit = [&](int rank, const ExitStatus& exit) {
    if (rank != 1 || exit.ok()) return;
    self->Hold(1);  // an elastic agent's restart: the new process comes a little later
    relauncher = std::thread([&] {
      absl::SleepFor(absl::Milliseconds(300));
      self->Relaunch(1, {{"/bin/sh", "-c", "echo again $RANK"}, {"PATH=/usr/bin:/bin", "RANK=7"}});
    });
  };
  Supervisor supervisor(launcher_, out_, err_, options);
  self = &supervisor;
  ASSERT_TRUE(
      supervisor.Start(ShellRanks(2, "if [ $RANK = 1 ]; then exit 3; fi; echo $RANK")).ok());
  SupervisorResult result = supervisor.Run();
  relauncher.join();
  EXPECT_THAT(out_.text(), HasSubstr("[1] again 7\n")) << "the relaunched process, same label";
  EXPECT_EQ(result.exits[1].code, 0) << "its exit is the one reported";
  EXPECT_EQ(result.ExitCode(), 0);
}

// A process added while the others run (troikarun's agent on a discovered host) is started
// as the next index and supervised as the others: Run() waits for it and reports its exit.
// Once Run() has ended, or a stop came, nothing is added.
TEST_F(SupervisorTest, AProcessAddedWhileRunningIsSupervisedAndNothingIsAddedOnceRunEnded) {
  SupervisorOptions options;
  options.stop_on_failure = false;
  Supervisor supervisor(launcher_, out_, err_, options);
  ASSERT_TRUE(supervisor.Start(ShellRanks(1, "sleep 0.5; echo first")).ok());
  std::thread adder([&] {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_EQ(supervisor.Add(
                  {{"/bin/sh", "-c", "sleep 0.8; echo added; exit 4"}, {"PATH=/usr/bin:/bin"}}),
              1);
    EXPECT_EQ(supervisor.Add({{"/no/such/program"}, {}}), 2) << "it exits as not found";
  });
  SupervisorResult result = supervisor.Run();
  adder.join();
  EXPECT_THAT(out_.text(), HasSubstr("[1] added\n")) << "Run() waited for the added process";
  ASSERT_EQ(result.exits.size(), 3u);
  EXPECT_EQ(result.exits[1].code, 4);
  EXPECT_EQ(result.exits[2].code, 127);
  EXPECT_THAT(err_.text(), HasSubstr("cannot start rank 2: "));
  EXPECT_EQ(result.labels, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(supervisor.Add({{"/bin/true"}, {}}), -1) << "Run() has ended";

  Supervisor stopped(launcher_, out_, err_, SupervisorOptions{});
  ASSERT_TRUE(stopped.Start(ShellRanks(1, "sleep 30")).ok());
  stopped.Stop("the job was aborted");
  EXPECT_EQ(stopped.Add({{"/bin/true"}, {}}), -1);
  stopped.Run();
}

TEST_F(SupervisorTest, AReleasedOrStoppedHoldEndsTheRun) {
  for (bool stop : {false, true}) {
    SupervisorOptions options;
    options.stop_on_failure = false;
    Supervisor* self = nullptr;
    absl::Notification held;
    options.on_exit = [&](int rank, const ExitStatus& exit) {
      if (!exit.ok()) self->Hold(rank);
      held.Notify();
    };
    Supervisor supervisor(launcher_, out_, err_, options);
    self = &supervisor;
    ASSERT_TRUE(supervisor.Start(ShellRanks(1, "exit 3")).ok());
    std::thread giver([&] {
      held.WaitForNotification();  // a release before the hold would release nothing
      // Not needed for the outcome: lets Run() (very likely) block in poll() first.
      absl::SleepFor(absl::Milliseconds(200));
      if (stop) {
        supervisor.Stop("the job was aborted");
      } else {
        supervisor.Release(0);
      }
    });
    const absl::Time start = absl::Now();
    SupervisorResult result = supervisor.Run();
    giver.join();
    EXPECT_LT(absl::Now() - start, absl::Seconds(60)) << (stop ? "stopped" : "released");
    EXPECT_EQ(result.exits[0].code, 3);
  }
}

TEST_F(SupervisorTest, RankKilledBySignalIsNamedWithTheSignal) {
  SupervisorResult result = RunRanks(2, "if [ $RANK = 0 ]; then kill -9 $$; fi; exec sleep 100");
  EXPECT_EQ(result.failed_rank, 0);
  EXPECT_EQ(result.ExitCode(), 128 + SIGKILL);
  EXPECT_THAT(err_.text(), HasSubstr("troikarun: rank 0 was killed by signal 9 (Killed)"));
}

TEST_F(SupervisorTest, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  SupervisorOptions options;
  options.grace_period = absl::Milliseconds(300);
  options.name = "agent";
  // Rank 0 fails once rank 1 ignores SIGTERM (a SIGTERM before its trap would end it).
  const std::string trapped = Marker("rank1-trapped");
  const absl::Time start = absl::Now();
  SupervisorResult result =
      RunRanks(2,
               "if [ $RANK = 0 ]; then " + WaitFor(trapped) + "exit 1; fi; trap '' TERM; : > '" +
                   trapped + "'; while :; do sleep 0.05; done",
               options);
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_GE(elapsed, absl::Milliseconds(300));
  EXPECT_LT(elapsed, absl::Seconds(60)) << "not hung";
  EXPECT_EQ(result.ExitCode(), 1);
  EXPECT_THAT(result.killed_ranks, ElementsAre(1));
  EXPECT_EQ(result.exits[1].signal, SIGKILL);
  EXPECT_THAT(err_.text(), HasSubstr("agent: sent SIGKILL to rank 1 (still running 300ms"));
  EXPECT_EQ(result.Summary(), "rank 0 exited with code 1; sent SIGKILL to rank 1");
}

TEST_F(SupervisorTest, ExitedRanksDoNotStopTheOthers) {
  SupervisorOptions options;  // rank 1 goes on only after rank 0's exit was seen
  options.on_exit = [&](int rank, const ExitStatus&) {
    if (rank == 0) Touch(Marker("rank0-exited"));
  };
  SupervisorResult result = RunRanks(
      2, "if [ $RANK = 1 ]; then " + WaitFor(Marker("rank0-exited")) + "fi; echo done $RANK",
      options);
  EXPECT_EQ(result.ExitCode(), 0);
  EXPECT_EQ(out_.text(), "[0] done 0\n[1] done 1\n");
  EXPECT_EQ(err_.text(), "");
}

TEST_F(SupervisorTest, SignalFromSignalFdIsForwardedToEveryRank) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &set, nullptr), 0);
  const int signal_fd = signalfd(-1, &set, SFD_CLOEXEC);
  ASSERT_GE(signal_fd, 0);
  SupervisorOptions options;
  options.signal_fd = signal_fd;
  Supervisor supervisor(launcher_, out_, err_, options);
  ASSERT_TRUE(supervisor.Start(ShellRanks(2, "exec sleep 100")).ok());
  kill(getpid(), SIGUSR1);  // pending until the supervisor reads it from the signalfd
  SupervisorResult result = supervisor.Run();
  close(signal_fd);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);

  EXPECT_EQ(result.signal, SIGUSR1);
  EXPECT_EQ(result.failed_rank, -1);
  EXPECT_EQ(result.ExitCode(), 128 + SIGUSR1);
  EXPECT_EQ(result.exits[0].signal, SIGUSR1);
  EXPECT_EQ(result.exits[1].signal, SIGUSR1);
  EXPECT_THAT(err_.text(), HasSubstr("forwarding it to 2 running ranks"));
}

TEST_F(SupervisorTest, FirstFailureCallbackRunsOnce) {
  std::vector<int> failed;
  SupervisorOptions options;
  options.on_first_failure = [&](int rank, const ExitStatus& exit) {
    failed.push_back(rank);
    EXPECT_EQ(exit.code, 2);
  };
  RunRanks(3, "exit 2", options);
  EXPECT_EQ(failed.size(), 1u);
}

TEST_F(SupervisorTest, CommandNotFoundFailsStartNamingRankAndCommand) {
  Supervisor supervisor(launcher_, out_, err_, {});
  absl::Status status = supervisor.Start({{{"troika-no-such-command"}, {}}});
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
  EXPECT_EQ(status.message(), "rank 0: command 'troika-no-such-command' not found in PATH");
}

// Delegates to the real launcher for the first `ok_launches` processes, then fails.
class FailingLauncher : public ProcessLauncher {
 public:
  explicit FailingLauncher(int ok_launches) : ok_launches_(ok_launches) {}
  absl::StatusOr<std::unique_ptr<Process>> Launch(const ProcessSpec& spec) override {
    if (ok_launches_-- <= 0) return absl::InternalError("no more processes");
    auto process = real_.Launch(spec);
    if (process.ok()) pids.push_back((*process)->pid());
    return process;
  }
  std::vector<pid_t> pids;

 private:
  int ok_launches_;
  PosixProcessLauncher real_;
};

TEST_F(SupervisorTest, FailedStartKillsAndReapsTheRanksAlreadyStarted) {
  FailingLauncher launcher(2);
  Supervisor supervisor(launcher, out_, err_, {});
  absl::Status status = supervisor.Start(ShellRanks(3, "exec sleep 100"));
  EXPECT_EQ(status.message(), "rank 2: no more processes");
  ASSERT_EQ(launcher.pids.size(), 2u);
  for (pid_t pid : launcher.pids) EXPECT_TRUE(ProcessGone(pid)) << pid;
}

// Hides the pidfd, as on kernels without pidfd_open: exits must still be noticed (by polling).
class NoExitFdLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<std::unique_ptr<Process>> Launch(const ProcessSpec& spec) override {
    auto process = real_.Launch(spec);
    if (!process.ok()) return process.status();
    return std::unique_ptr<Process>(new NoExitFd(*std::move(process)));
  }

 private:
  class NoExitFd : public Process {
   public:
    explicit NoExitFd(std::unique_ptr<Process> p) : p_(std::move(p)) {}
    int pid() const override { return p_->pid(); }
    int stdout_fd() const override { return p_->stdout_fd(); }
    int stderr_fd() const override { return p_->stderr_fd(); }
    int exit_fd() const override { return -1; }
    std::optional<ExitStatus> TryReap() override { return p_->TryReap(); }
    ExitStatus Wait() override { return p_->Wait(); }
    void Signal(int signal) override { p_->Signal(signal); }

   private:
    std::unique_ptr<Process> p_;
  };
  PosixProcessLauncher real_;
};

TEST_F(SupervisorTest, WorksWithoutExitDescriptors) {
  NoExitFdLauncher launcher;
  Supervisor supervisor(launcher, out_, err_, {});
  // Rank 1 closes its output early, so only polling can notice its exit.
  ASSERT_TRUE(supervisor
                  .Start(ShellRanks(2,
                                    "if [ $RANK = 1 ]; then exec >&- 2>&-; sleep 0.2; exit 4; "
                                    "fi; exec sleep 1000"))
                  .ok());
  const absl::Time start = absl::Now();
  SupervisorResult result = supervisor.Run();
  EXPECT_LT(absl::Now() - start, absl::Seconds(60)) << "not hung";
  EXPECT_EQ(result.failed_rank, 1);
  EXPECT_EQ(result.ExitCode(), 4);
  EXPECT_EQ(result.exits[0].signal, SIGTERM);
}

TEST_F(SupervisorTest, LabelsNameAndPrefixTheProcesses) {
  SupervisorOptions options;
  options.labels = {4, 5};
  options.name = "troika-agent";
  std::vector<std::pair<int, int>> exits;
  options.on_exit = [&](int rank, const ExitStatus& exit) {
    exits.emplace_back(rank, exit.code);
    if (rank == 4) Touch(Marker("rank4-exited"));
  };
  // The second process fails only after the first one's exit was seen.
  SupervisorResult result = RunRanks(
      2, "echo out $RANK; if [ $RANK = 1 ]; then " + WaitFor(Marker("rank4-exited")) + "exit 6; fi",
      options);
  // Two processes write concurrently: each line is whole and labelled, in either order.
  EXPECT_THAT(absl::StrSplit(out_.text(), '\n', absl::SkipEmpty()),
              ::testing::UnorderedElementsAre("[4] out 0", "[5] out 1"));
  EXPECT_THAT(err_.text(), HasSubstr("troika-agent: rank 5 exited with code 6\n"));
  EXPECT_EQ(result.Summary(), "rank 5 exited with code 6");
  EXPECT_THAT(exits, ElementsAre(std::pair<int, int>{4, 0}, std::pair<int, int>{5, 6}))
      << "every exit, not only failures";
}

TEST_F(SupervisorTest, OutputCanPassThroughUnprefixed) {
  SupervisorOptions options;
  options.prefix_output = false;
  options.noun = "agent";
  SupervisorResult result = RunRanks(1, "echo '[7] from a rank'; exit 2", options);
  EXPECT_EQ(out_.text(), "[7] from a rank\n");
  EXPECT_EQ(result.Summary(), "agent 0 exited with code 2");
}

TEST_F(SupervisorTest, StopDelayLetsRanksExitOnTheirOwnBeforeSigterm) {
  SupervisorOptions options;
  // Rank 1 exits once told to stop (rank 0's failure was seen), within a delay that a slow
  // machine cannot exhaust; rank 2 never does.
  options.stop_delay = absl::Seconds(10);
  options.on_first_failure = [&](int, const ExitStatus&) { Touch(Marker("told")); };
  SupervisorResult result = RunRanks(3,
                                     "if [ $RANK = 0 ]; then exit 2; fi; if [ $RANK = 1 ]; then " +
                                         WaitFor(Marker("told")) + "exit 0; fi; exec sleep 1000",
                                     options);
  EXPECT_EQ(result.ExitCode(), 2);
  EXPECT_TRUE(result.exits[1].ok()) << "rank 1 exited on its own, unsignalled";
  EXPECT_EQ(result.exits[2].signal, SIGTERM);
  EXPECT_THAT(err_.text(), HasSubstr("troikarun: sent SIGTERM to rank 2 (still running 10s after "
                                     "being told to stop)"));
}

TEST_F(SupervisorTest, StopEndsEveryRankAndNamesTheReason) {
  Supervisor supervisor(launcher_, out_, err_, {});
  ASSERT_TRUE(supervisor.Start(ShellRanks(2, "exec sleep 100")).ok());
  supervisor.Stop("the job was aborted");  // before Run(): honoured when it starts
  supervisor.Stop("ignored: only the first reason counts");
  const absl::Time start = absl::Now();
  SupervisorResult result = supervisor.Run();
  EXPECT_LT(absl::Now() - start, absl::Seconds(60)) << "SIGTERM, not a hang";
  EXPECT_EQ(result.failed_rank, -1) << "ranks stopped on request are not failures";
  EXPECT_EQ(result.stop_reason, "the job was aborted");
  EXPECT_EQ(result.exits[0].signal, SIGTERM);
  EXPECT_EQ(err_.text(), "troikarun: the job was aborted; stopping 2 running ranks\n");
}

TEST_F(SupervisorTest, StopFromAnotherThreadWakesTheLoop) {
  Supervisor supervisor(launcher_, out_, err_, {});
  ASSERT_TRUE(supervisor.Start(ShellRanks(1, "echo up; exec sleep 100")).ok());
  std::thread stopper([&] {
    // Stops once the rank's output shows it runs, so Run() is (very likely) in poll().
    while (out_.text().empty()) std::this_thread::yield();
    supervisor.Stop("lost the coordinator");
  });
  SupervisorResult result = supervisor.Run();
  stopper.join();
  EXPECT_EQ(result.exits[0].signal, SIGTERM);
  EXPECT_EQ(result.stop_reason, "lost the coordinator");
}

}  // namespace
}  // namespace troika::agent
