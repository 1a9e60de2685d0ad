#pragma once
// DiscoveryLoop: troikarun's side of an elastic job across hosts. Once a second it runs the
// host discovery script and carries out what ElasticHosts decides: starts an agent on each new
// host (through `hooks.start`: checked over ssh, then added to the supervisor), drains each
// host that left (`hooks.drain`: the coordinator ends the generation at the next commit
// without it), and fails the job past --reset-limit. A script that fails is reported and
// retried; the job goes on with the hosts it has.
//
// Thread-safe: Start() and Stop() from the owner; AgentExited() from any thread.

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/launch/line_forwarder.h"
#include "agent/launch/process_launcher.h"
#include "agent/launcher/elastic_hosts.h"

namespace troika::agent {

class DiscoveryLoop {
 public:
  struct Hooks {
    // Starts an agent of `ranks` ranks on `host`; false (having said why) if it could not.
    std::function<bool(const std::string& host, int ranks)> start;
    // Drains `host` at the job's next commit (Job::Drain).
    std::function<absl::Status(const std::string& host)> drain;
    // The job's resets so far (its generations after the first).
    std::function<int()> resets;
    // Fails the job with `reason`.
    std::function<void(const std::string& reason)> fail;
  };
  struct Settings {
    std::string script;
    int slots_per_host = 1;
    int reset_limit = -1;  // the job fails once more resets than this happened; -1: no limit
    absl::Duration period = absl::Seconds(1);
    absl::Duration script_timeout = absl::Seconds(30);
  };

  // `launcher` runs the script; `hosts` holds the hosts the job started on; `err` gets
  // troikarun's messages. All must outlive the loop.
  DiscoveryLoop(Settings settings, ElasticHosts& hosts, ProcessLauncher& launcher, Hooks hooks,
                OutputSink& err);
  ~DiscoveryLoop();  // Stop()

  void Start();
  // Ends the loop and waits for its thread (a round in progress finishes first).
  void Stop();
  // `host`'s agent exited with `exit` (a failure blacklists the host).
  void AgentExited(const std::string& host, const ExitStatus& exit);

 private:
  void Loop();
  void Round();

  const Settings settings_;
  ProcessLauncher& launcher_;
  const Hooks hooks_;
  OutputSink& err_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mu_
  ElasticHosts& hosts_;    // guarded by mu_
  // Guarded by mu_: the last message about the script, and about each draining host, not
  // repeated each round.
  std::string last_problem_;
  std::map<std::string, std::string> said_;
  std::thread thread_;
};

}  // namespace troika::agent
