#include "agent/launcher/agent_commands.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/cli/command_line.h"
#include "agent/launch/environment_block.h"

namespace troika::agent {

ProcessSpec AgentSpec(const TroikarunOptions& options, const JobLaunch& job,
                      const AgentPlacement& placement) {
  std::vector<std::string> argv = {
      job.agent,
      absl::StrCat("--coordinator=", placement.coordinator),
      absl::StrCat("--job=", job.job),
      absl::StrCat("--nnodes=", placement.nnodes),
      absl::StrCat("--nproc-per-node=", placement.ranks),
      absl::StrCat("--node_rank=", placement.node_rank),
      absl::StrCat("--grace_period=", absl::FormatDuration(options.grace_period)),
      absl::StrCat("--attach_timeout=", absl::FormatDuration(options.attach_timeout)),
      absl::StrCat("--log_level=", options.log_level),
      absl::StrCat("--min_np=", options.min_np),
      absl::StrCat("--max_np=", options.max_np),
      absl::StrCat("--max_restarts=", options.max_restarts),
      "--stop_with_parent=true"};
  if (!placement.host.empty()) argv.push_back(absl::StrCat("--host=", placement.host));
  if (!job.data_interfaces.empty()) {
    argv.push_back(absl::StrCat("--data_interface=", absl::StrJoin(job.data_interfaces, ",")));
  }
  // An external coordinator is reached as the TROIKA_TLS_* / TROIKA_PLAINTEXT settings the
  // agents inherit say.
  if (job.plaintext) argv.push_back("--plaintext=true");
  if (!placement.remote) {
    argv.push_back("--");
    argv.insert(argv.end(), options.command.begin(), options.command.end());
    return {std::move(argv), MergeEnvironment(job.environment, job.variables)};
  }
  argv.push_back("--launcher_stdin=true");
  argv.push_back("--");
  argv.insert(argv.end(), options.command.begin(), options.command.end());
  // The agent replaces the login shell (exec): its stdin is the ssh session's, and its exit
  // status is ssh's.
  std::string remote;
  if (!job.working_directory.empty()) {
    remote = absl::StrCat("cd ", ShellQuote(job.working_directory), " 2>/dev/null; ");
  }
  absl::StrAppend(&remote, "exec ", ShellJoin(argv));
  ProcessSpec spec{SshArgv(job.ssh, placement.host, remote), job.environment};
  spec.control_input = EncodeEnvironmentBlock(
      MergeEnvironment(ForwardedEnvironment(job.environment), job.variables));
  return spec;
}

}  // namespace troika::agent
