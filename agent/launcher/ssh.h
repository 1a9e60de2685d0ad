#pragma once
// The ssh command lines troikarun runs: `ssh [options] HOST COMMAND`, COMMAND one string the
// remote login shell runs.
//
// Pure functions; thread-safe.

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace troika::agent {

struct SshOptions {
  // The ssh program and options of one's own: $TROIKA_SSH_COMMAND split at spaces (as
  // GIT_SSH_COMMAND, without quoting), e.g. "ssh -F ~/.ssh/cluster_config"; default "ssh".
  std::vector<std::string> command = {"ssh"};
  int port = 0;                                        // -p; 0: ssh's default
  std::string identity_file;                           // -i; empty: ssh's default
  absl::Duration connect_timeout = absl::Seconds(30);  // ConnectTimeout, rounded up to seconds
};

// SshOptions::command from $TROIKA_SSH_COMMAND's value (null or blank: "ssh").
std::vector<std::string> SshCommandFromEnvironment(const char* value);

// The argv that runs `remote_command` on `host`: never prompts (BatchMode), trusts a host key
// the first time and refuses a changed one (StrictHostKeyChecking=accept-new), gives up
// connecting after connect_timeout.
std::vector<std::string> SshArgv(const SshOptions& options, const std::string& host,
                                 const std::string& remote_command);

// `arg` as one word for a POSIX shell: unchanged when it holds only safe characters, else in
// single quotes.
std::string ShellQuote(const std::string& arg);
// The words quoted and joined with spaces.
std::string ShellJoin(const std::vector<std::string>& args);

}  // namespace troika::agent
