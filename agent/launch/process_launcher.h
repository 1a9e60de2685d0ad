#pragma once
// ProcessLauncher: the agent's edge with the operating system's processes. The supervisor
// starts ranks only through this interface, so a later troika-agent (or a test) can supply
// another implementation; PosixProcessLauncher (posix_process_launcher.h) is the real one.
//
// A Process exposes file descriptors (its output pipes and a descriptor that becomes readable
// when it exits) so that one thread can wait for all of its processes with poll(2). A fake
// implementation can hand out pipes or eventfds it controls.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace troika::agent {

// What to start.
struct ProcessSpec {
  // argv[0] is a path, or a name looked up in PATH. Must not be empty.
  std::vector<std::string> argv;
  // The complete environment of the new process, "NAME=value" entries.
  std::vector<std::string> env;
  // The child's stdin: this descriptor, dup'ed into the child (the caller keeps it and closes
  // it after Launch). -1 (default): /dev/null.
  int stdin_fd = -1;
  // Set: the child reads this text from a pipe its launcher holds open, and a stop (SIGINT or
  // SIGTERM) closes the pipe instead of signalling: for a process that stops itself when its
  // stdin ends (ssh running a remote troika-agent --launcher_stdin). Only a
  // ControlPipeLauncher (control_pipe_launcher.h) starts such a spec; others refuse it.
  std::optional<std::string> control_input = std::nullopt;
};

// How a process ended.
struct ExitStatus {
  int code = 0;    // exit code, when signal == 0
  int signal = 0;  // the signal that killed it; 0 if it exited

  bool ok() const { return signal == 0 && code == 0; }
  // "exited with code 1" or "was killed by signal 9 (Killed)".
  std::string ToString() const;
  // What a POSIX shell reports as $?: `code`, or 128 + `signal`.
  int ShellCode() const { return signal != 0 ? 128 + signal : code; }
};

// "signal 9 (Killed)".
std::string SignalDescription(int signal);

// One launched process. Owned by one thread (not thread-safe). Destroying a process that has
// not been reaped kills it (SIGKILL) and reaps it, so no child outlives its owner unnoticed.
class Process {
 public:
  virtual ~Process() = default;

  virtual int pid() const = 0;
  // Non-blocking read ends of the process's stdout and stderr; they report end-of-file once
  // the process (and every process that inherited them) has closed them. Owned by the Process.
  virtual int stdout_fd() const = 0;
  virtual int stderr_fd() const = 0;
  // A descriptor that poll(2) reports readable once the process has exited, or -1 if the
  // platform has none (the owner must then call TryReap() periodically).
  virtual int exit_fd() const = 0;

  // Reaps the process if it has exited and returns how; nullopt while it runs. Never blocks.
  // After the first non-empty result, returns that same result.
  virtual std::optional<ExitStatus> TryReap() = 0;
  // Blocks until the process has exited; reaps it.
  virtual ExitStatus Wait() = 0;
  // Sends `signal` to the process and the processes it started (its process group). No-op
  // once reaped.
  virtual void Signal(int signal) = 0;
};

// Thread-safe.
class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts `spec`. Fails with NOT_FOUND when argv[0] does not name an existing program,
  // PERMISSION_DENIED when it cannot be executed, INVALID_ARGUMENT for an empty argv, and
  // INTERNAL for other failures; each message names the program and the reason.
  virtual absl::StatusOr<std::unique_ptr<Process>> Launch(const ProcessSpec& spec) = 0;
};

}  // namespace troika::agent
