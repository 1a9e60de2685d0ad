// Elastic jobs across hosts, troikarun's side: the discovery script's output, the blacklist and
// its cooldown (horovodrun's formula), which hosts start and drain (ElasticHosts), and the loop
// that runs the script every period and carries the decisions out (DiscoveryLoop, with hooks
// standing in for ssh and the coordinator).

#include "agent/launcher/host_discovery.h"

#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "agent/launch/posix_process_launcher.h"
#include "agent/launcher/discovery_loop.h"
#include "agent/launcher/elastic_hosts.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/memory_sink.h"

namespace troika::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class Script {
 public:
  Script() {
    char dir[] = "/tmp/troika-discovery-XXXXXX";
    EXPECT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/discover.sh";
  }
  ~Script() { std::system(("rm -rf " + dir_).c_str()); }
  // The script prints `hosts` (replaced atomically, as a user's script might read a file).
  void Prints(const std::string& hosts) { Is("printf '" + hosts + "'\n"); }
  void Is(const std::string& body) {
    std::ofstream(path_ + ".new") << "#!/bin/sh\n" << body;
    chmod((path_ + ".new").c_str(), 0755);
    std::rename((path_ + ".new").c_str(), path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
};

TEST(HostDiscoveryTest, ReadsHostsWithAndWithoutSlots) {
  EXPECT_THAT(*ParseDiscoveredHosts("h1:2\n  h2 \n\nh3:8\n", 3),
              ElementsAre(HostSlots{"h1", 2}, HostSlots{"h2", 3}, HostSlots{"h3", 8}));
  EXPECT_THAT(*ParseDiscoveredHosts("", 1), IsEmpty());
  EXPECT_THAT(ParseDiscoveredHosts("h1:2\nh2:x\n", 1).status().message(),
              HasSubstr("line 2 'h2:x' is not HOST or HOST:SLOTS"));
  EXPECT_THAT(ParseDiscoveredHosts("h1:0\n", 1).status().message(), HasSubstr("at least 1"));
  EXPECT_THAT(ParseDiscoveredHosts("h1\nh1:2\n", 1).status().message(),
              HasSubstr("names h1 twice (line 2)"));
  EXPECT_THAT(ParseDiscoveredHosts("-oProxyCommand=x\n", 1).status().message(),
              HasSubstr("does not name a host"));
}

TEST(HostDiscoveryTest, RunsTheScriptAndSaysWhyWhenItFails) {
  PosixProcessLauncher launcher;
  Script script;
  script.Prints("h1:2\\nh2\\n");
  EXPECT_EQ(*RunDiscoveryScript(launcher, script.path(), absl::Seconds(20)), "h1:2\nh2\n");
  script.Is("echo no inventory >&2; exit 3\n");
  EXPECT_THAT(RunDiscoveryScript(launcher, script.path(), absl::Seconds(20)).status().message(),
              HasSubstr("exited with code 3: no inventory"));
  script.Is("exec sleep 30\n");
  const absl::Time start = absl::Now();
  EXPECT_THAT(
      RunDiscoveryScript(launcher, script.path(), absl::Milliseconds(300)).status().message(),
      HasSubstr("did not finish within 300ms"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(HostBlacklistTest, WithoutACooldownAFailedHostIsLeftOutForGood) {
  HostBlacklist blacklist(std::nullopt, [] { return 0.5; });
  const absl::Time t = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(blacklist.Blocked("h", t));
  blacklist.Fail("h", t);
  EXPECT_TRUE(blacklist.Blocked("h", t + absl::Hours(100)));
  EXPECT_EQ(blacklist.Describe("h", t), "left out for good");
  EXPECT_FALSE(blacklist.Blocked("other", t));
}

TEST(HostBlacklistTest, TheCooldownDoublesWithEachFailureWithinTheRange) {
  HostBlacklist blacklist(std::make_pair(2, 10), [] { return 0.5; });
  absl::Time t = absl::FromUnixSeconds(1000);
  blacklist.Fail("h", t);  // 2 * 2 + 0.5 * 2 = 5 s
  EXPECT_TRUE(blacklist.Blocked("h", t + absl::Seconds(4.9)));
  EXPECT_FALSE(blacklist.Blocked("h", t + absl::Seconds(5.1)));
  blacklist.Fail("h", t + absl::Seconds(1));  // the same episode: nothing changes
  EXPECT_FALSE(blacklist.Blocked("h", t + absl::Seconds(5.1)));
  t += absl::Seconds(6);
  blacklist.Fail("h", t);  // 2 * 4 + 1 = 9 s
  EXPECT_TRUE(blacklist.Blocked("h", t + absl::Seconds(8.9)));
  EXPECT_EQ(blacklist.Describe("h", t + absl::Seconds(1)),
            "left out until its cooldown ends in 8s");
  t += absl::Seconds(10);
  blacklist.Fail("h", t);  // 2 * 8 + 1 = 17 s, at most 10
  EXPECT_TRUE(blacklist.Blocked("h", t + absl::Seconds(9.9)));
  EXPECT_FALSE(blacklist.Blocked("h", t + absl::Seconds(10.1)));
}

TEST(ElasticHostsTest, NewHostsStartUpToTheMaximumAndMissingOnesDrain) {
  ElasticHosts hosts(6, HostBlacklist(std::nullopt, [] { return 0.0; }));
  const absl::Time t = absl::Now();
  hosts.Started("h1", 2);
  hosts.Started("h2", 2);
  ElasticHosts::Plan plan = hosts.Update({{"h1", 2}, {"h2", 2}, {"h3", 4}, {"h4", 2}}, t);
  EXPECT_THAT(plan.start, ElementsAre(HostSlots{"h3", 2})) << "2 ranks left below the maximum";
  EXPECT_THAT(plan.drain, IsEmpty());
  EXPECT_EQ(hosts.ranks(), 6);
  plan = hosts.Update({{"h1", 2}, {"h3", 4}, {"h4", 2}}, t);
  EXPECT_THAT(plan.drain, ElementsAre("h2"));
  EXPECT_THAT(plan.start, IsEmpty()) << "h2 runs until its agent exits";
  hosts.Exited("h2", /*failed=*/false, t);
  plan = hosts.Update({{"h1", 2}, {"h3", 4}, {"h4", 2}}, t);
  EXPECT_THAT(plan.start, ElementsAre(HostSlots{"h4", 2}));
  // A failed host is blacklisted: listed again, it gets no agent.
  EXPECT_EQ(hosts.Exited("h4", /*failed=*/true, t), "left out for good");
  plan = hosts.Update({{"h1", 2}, {"h3", 4}, {"h4", 2}}, t);
  EXPECT_THAT(plan.start, IsEmpty());
  EXPECT_FALSE(hosts.running("h4"));
}

TEST(DiscoveryLoopTest, StartsDrainsAndFailsPastTheResetLimitAsTheScriptChanges) {
  PosixProcessLauncher launcher;
  Script script;
  script.Prints("h1:2\\nh2:2\\n");
  ElasticHosts hosts(8, HostBlacklist(std::nullopt, [] { return 0.0; }));
  hosts.Started("h1", 2);
  hosts.Started("h2", 2);
  std::mutex mu;
  std::vector<std::string> started, drained;
  std::atomic<int> resets{0};
  std::string failed;
  absl::Notification got_h3, got_drain, got_fail;
  DiscoveryLoop::Hooks hooks;
  hooks.start = [&](const std::string& host, int ranks) {
    std::lock_guard<std::mutex> lock(mu);
    started.push_back(host + ":" + std::to_string(ranks));
    if (!got_h3.HasBeenNotified()) got_h3.Notify();
    return true;
  };
  hooks.drain = [&](const std::string& host) {
    std::lock_guard<std::mutex> lock(mu);
    drained.push_back(host);
    if (!got_drain.HasBeenNotified()) got_drain.Notify();
    return absl::OkStatus();
  };
  hooks.resets = [&] { return resets.load(); };
  hooks.fail = [&](const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu);
    failed = reason;
    if (!got_fail.HasBeenNotified()) got_fail.Notify();
  };
  MemorySink err;
  DiscoveryLoop loop({script.path(), 1, 2, absl::Milliseconds(20), absl::Seconds(20)}, hosts,
                     launcher, hooks, err);
  loop.Start();
  script.Prints("h1:2\\nh2:2\\nh3:2\\n");
  ASSERT_TRUE(got_h3.WaitForNotificationWithTimeout(absl::Seconds(30)));
  script.Prints("h1:2\\nh3:2\\n");
  ASSERT_TRUE(got_drain.WaitForNotificationWithTimeout(absl::Seconds(30)));
  resets = 3;
  ASSERT_TRUE(got_fail.WaitForNotificationWithTimeout(absl::Seconds(30)));
  loop.Stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_THAT(started, ElementsAre("h3:2")) << "h3 started once";
  EXPECT_EQ(drained.front(), "h2");
  EXPECT_EQ(failed, "the job reset 3 times, more than --reset-limit 2");
  EXPECT_THAT(err.text(), HasSubstr("h2 left the host discovery output: its ranks leave the job at "
                                    "its next commit"));
}

TEST(DiscoveryLoopTest, AFailingScriptIsReportedOnceAndTheJobGoesOn) {
  PosixProcessLauncher launcher;
  Script script;
  script.Is("echo inventory down >&2; exit 1\n");
  ElasticHosts hosts(8, HostBlacklist(std::nullopt, [] { return 0.0; }));
  hosts.Started("h1", 2);
  DiscoveryLoop::Hooks hooks;
  std::atomic<int> drains{0};
  hooks.start = [](const std::string&, int) { return true; };
  hooks.drain = [&](const std::string&) {
    ++drains;
    return absl::OkStatus();
  };
  hooks.resets = [] { return 0; };
  hooks.fail = [](const std::string&) { ADD_FAILURE() << "no reset limit"; };
  MemorySink err;
  DiscoveryLoop loop({script.path(), 1, -1, absl::Milliseconds(20), absl::Seconds(20)}, hosts,
                     launcher, hooks, err);
  loop.Start();
  absl::SleepFor(absl::Milliseconds(300));
  loop.Stop();
  EXPECT_EQ(drains, 0) << "a failed script drains nothing";
  const std::string text = err.text();
  EXPECT_THAT(text, HasSubstr("exited with code 1: inventory down"));
  EXPECT_EQ(text.find("inventory down"), text.rfind("inventory down")) << "said once";
}

}  // namespace
}  // namespace troika::agent
