#pragma once
// The environment troikarun hands a remote troika-agent on its stdin (over ssh), rather than
// on a command line every user of that host can read (it carries the job's token): each
// "NAME=value" entry followed by a NUL byte, and one more NUL at the end. After the block,
// the agent's stdin stays open as long as its launcher lives (control_pipe_launcher.h).
//
// Pure functions; thread-safe.

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace troika::agent {

// The block of `entries` ("NAME=value"; a value may hold any byte but NUL).
std::string EncodeEnvironmentBlock(const std::vector<std::string>& entries);

// Reads one block from `fd`, no further (byte by byte: what follows is not consumed).
// INVALID_ARGUMENT when the input ends before the block does, or an entry has no '=' or
// holds a NUL where one cannot be; the error says what was read.
absl::StatusOr<std::vector<std::string>> ReadEnvironmentBlock(int fd);

// The environment troikarun forwards to remote hosts, as horovodrun does: every entry of
// `environment` but those that belong to this host or shell (BASH_FUNC_*, OLDPWD, *CUDA_VISIBLE_
// DEVICES, and the ones ssh and the remote login set: SSH_*, HOSTNAME, PWD, SHLVL, _).
std::vector<std::string> ForwardedEnvironment(const std::vector<std::string>& environment);

}  // namespace troika::agent
