#include "agent/launcher/discovery_loop.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace troika::agent {

DiscoveryLoop::DiscoveryLoop(Settings settings, ElasticHosts& hosts, ProcessLauncher& launcher,
                             Hooks hooks, OutputSink& err)
    : settings_(std::move(settings)),
      launcher_(launcher),
      hooks_(std::move(hooks)),
      err_(err),
      hosts_(hosts) {}

DiscoveryLoop::~DiscoveryLoop() { Stop(); }

void DiscoveryLoop::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void DiscoveryLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DiscoveryLoop::AgentExited(const std::string& host, const ExitStatus& exit) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string now = hosts_.Exited(host, !exit.ok(), absl::Now());
  said_.erase(host);
  if (!exit.ok()) {
    err_.Write(absl::StrCat("troikarun: the agent on ", host, " ", exit.ToString(),
                            "; the host is ", now, "\n"));
  }
}

void DiscoveryLoop::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    Round();
    lock.lock();
    wake_.wait_for(lock, absl::ToChronoMilliseconds(settings_.period),
                   [this] { return stopping_; });
  }
}

void DiscoveryLoop::Round() {
  if (settings_.reset_limit >= 0 && hooks_.resets() > settings_.reset_limit) {
    hooks_.fail(absl::StrCat("the job reset ", hooks_.resets(), " times, more than --reset-limit ",
                             settings_.reset_limit));
    return;
  }
  absl::StatusOr<std::string> output =
      RunDiscoveryScript(launcher_, settings_.script, settings_.script_timeout);
  absl::StatusOr<std::vector<HostSlots>> discovered =
      output.ok() ? ParseDiscoveredHosts(*output, settings_.slots_per_host)
                  : absl::StatusOr<std::vector<HostSlots>>(output.status());
  ElasticHosts::Plan plan;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!discovered.ok()) {
      // Said once until it changes: a script failing every second must not flood the log.
      const std::string problem(discovered.status().message());
      if (problem != last_problem_) err_.Write(absl::StrCat("troikarun: ", problem, "\n"));
      last_problem_ = problem;
      return;
    }
    last_problem_.clear();
    if (stopping_) return;
    plan = hosts_.Update(*discovered, absl::Now());
  }
  for (const std::string& host : plan.drain) {
    // Asked every round until the host's agent has exited: a generation that ends before the
    // commit (a loss) forgets what the one before was asked.
    const absl::Status drained = hooks_.drain(host);
    const std::string said =
        drained.ok()
            ? absl::StrCat(host,
                           " left the host discovery output: its ranks leave the "
                           "job at its next commit")
            : absl::StrCat(host, " left the host discovery output, but ", drained.message());
    std::lock_guard<std::mutex> lock(mu_);
    if (said_[host] != said) err_.Write(absl::StrCat("troikarun: ", said, "\n"));
    said_[host] = said;
  }
  for (const HostSlots& host : plan.start) {
    if (!hooks_.start(host.host, host.slots)) {
      std::lock_guard<std::mutex> lock(mu_);
      hosts_.Exited(host.host, /*failed=*/true, absl::Now());
    }
  }
}

}  // namespace troika::agent
