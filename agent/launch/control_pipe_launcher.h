#pragma once
// ControlPipeLauncher: starts processes that are told to stop by the end of their stdin rather
// than by a signal — ssh running a troika-agent on another host, which no signal sent here
// reaches. For a spec with control_input, the child's stdin is a pipe this launcher holds: the
// input is written to it at once, and the Process's Signal(SIGINT or SIGTERM) closes it (the
// remote agent then stops its ranks and exits, and ssh with it); other signals (SIGKILL) are
// sent as they are. The pipe also closes when the Process is destroyed, or when this process
// dies, so a remote agent never outlives its launcher. Specs without control_input go to the
// inner launcher untouched.

#include <memory>

#include "agent/launch/process_launcher.h"

namespace troika::agent {

// Thread-safe if `inner` is.
class ControlPipeLauncher : public ProcessLauncher {
 public:
  // `inner` must outlive this launcher and the processes it starts.
  explicit ControlPipeLauncher(ProcessLauncher& inner) : inner_(inner) {}
  // INVALID_ARGUMENT for control input larger than a pipe holds (1 MiB, set with
  // F_SETPIPE_SZ); else as the inner launcher.
  absl::StatusOr<std::unique_ptr<Process>> Launch(const ProcessSpec& spec) override;

 private:
  ProcessLauncher& inner_;
};

}  // namespace troika::agent
