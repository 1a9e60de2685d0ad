#pragma once
// PosixProcessLauncher: starts processes with posix_spawnp(3) (safe in a multi-threaded
// program such as one hosting an embedded coordinator), on Linux.
//
// Every child:
//   - gets stdin from /dev/null (or spec.stdin_fd), and stdout and stderr each on its own pipe,
//   whose read end
//     (non-blocking, close-on-exec) the Process owns;
//   - leads a new process group, so Process::Signal() reaches the processes it starts too
//     (a `sh -c` wrapper and its children), and a terminal's Ctrl-C reaches only the launcher,
//     which decides what to forward;
//   - starts with an empty signal mask and every signal at its default action, whatever the
//     launcher blocks or ignores (troikarun blocks SIGINT/SIGTERM and ignores SIGPIPE).
// Exit is observed through a pidfd (pidfd_open(2)); where the kernel has none, exit_fd() is -1.

#include <memory>

#include "agent/launch/process_launcher.h"

namespace troika::agent {

// Thread-safe; stateless.
class PosixProcessLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<std::unique_ptr<Process>> Launch(const ProcessSpec& spec) override;
};

}  // namespace troika::agent
