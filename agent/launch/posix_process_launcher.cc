#include "agent/launch/posix_process_launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace troika::agent {
namespace {

ExitStatus FromWaitStatus(int status) {
  ExitStatus exit;
  if (WIFSIGNALED(status)) {
    exit.signal = WTERMSIG(status);
  } else {
    exit.code = WEXITSTATUS(status);
  }
  return exit;
}

void CloseIfOpen(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

class PosixProcess : public Process {
 public:
  PosixProcess(pid_t pid, int stdout_fd, int stderr_fd, int pidfd)
      : pid_(pid), stdout_fd_(stdout_fd), stderr_fd_(stderr_fd), pidfd_(pidfd) {}
  PosixProcess(const PosixProcess&) = delete;
  PosixProcess& operator=(const PosixProcess&) = delete;

  ~PosixProcess() override {
    if (!exit_.has_value()) {
      Signal(SIGKILL);
      Wait();
    }
    CloseIfOpen(stdout_fd_);
    CloseIfOpen(stderr_fd_);
    CloseIfOpen(pidfd_);
  }

  int pid() const override { return pid_; }
  int stdout_fd() const override { return stdout_fd_; }
  int stderr_fd() const override { return stderr_fd_; }
  int exit_fd() const override { return pidfd_; }

  std::optional<ExitStatus> TryReap() override { return Reap(WNOHANG); }

  ExitStatus Wait() override { return *Reap(0); }

  void Signal(int signal) override {
    // While the leader is unreaped (at worst a zombie) its pid, and so the group id, cannot
    // have been reused: signalling the group is safe. After reaping it is not.
    if (exit_.has_value()) return;
    if (kill(-pid_, signal) != 0) kill(pid_, signal);
  }

 private:
  std::optional<ExitStatus> Reap(int flags) {
    if (exit_.has_value()) return exit_;
    int status = 0;
    pid_t r;
    do {
      r = waitpid(pid_, &status, flags);
    } while (r < 0 && errno == EINTR);
    if (r == pid_) exit_ = FromWaitStatus(status);
    // ECHILD: someone else reaped it (only possible if the owner misuses waitpid(-1)).
    if (r < 0) exit_ = ExitStatus{.code = 255};
    return exit_;
  }

  const pid_t pid_;
  int stdout_fd_;
  int stderr_fd_;
  int pidfd_;
  std::optional<ExitStatus> exit_;
};

// Owns the posix_spawn attribute objects and the argv/envp arrays for one launch.
class SpawnArgs {
 public:
  explicit SpawnArgs(const ProcessSpec& spec) {
    for (const std::string& arg : spec.argv) argv_.push_back(const_cast<char*>(arg.c_str()));
    argv_.push_back(nullptr);
    for (const std::string& var : spec.env) envp_.push_back(const_cast<char*>(var.c_str()));
    envp_.push_back(nullptr);
    posix_spawn_file_actions_init(&actions_);
    posix_spawnattr_init(&attr_);
  }
  ~SpawnArgs() {
    posix_spawn_file_actions_destroy(&actions_);
    posix_spawnattr_destroy(&attr_);
  }
  SpawnArgs(const SpawnArgs&) = delete;
  SpawnArgs& operator=(const SpawnArgs&) = delete;

  // Sets up stdin, the output pipes' write ends, the process group and the signal state.
  void Configure(int stdin_fd, int stdout_write, int stderr_write) {
    if (stdin_fd >= 0) {
      posix_spawn_file_actions_adddup2(&actions_, stdin_fd, STDIN_FILENO);
    } else {
      posix_spawn_file_actions_addopen(&actions_, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    }
    posix_spawn_file_actions_adddup2(&actions_, stdout_write, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions_, stderr_write, STDERR_FILENO);
    sigset_t empty, all;
    sigemptyset(&empty);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr_, &empty);
    posix_spawnattr_setsigdefault(&attr_, &all);
    posix_spawnattr_setpgroup(&attr_, 0);
    posix_spawnattr_setflags(
        &attr_, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  }

  int Spawn(pid_t* pid) {
    return posix_spawnp(pid, argv_[0], &actions_, &attr_, argv_.data(), envp_.data());
  }

 private:
  std::vector<char*> argv_;
  std::vector<char*> envp_;
  posix_spawn_file_actions_t actions_;
  posix_spawnattr_t attr_;
};

absl::Status SpawnError(const std::string& program, int error) {
  std::string message = absl::StrCat("cannot start '", program, "': ", strerrordesc_np(error));
  switch (error) {
    case ENOENT:
      if (program.find('/') == std::string::npos) {
        return absl::NotFoundError(absl::StrCat("command '", program, "' not found in PATH"));
      }
      return absl::NotFoundError(message);
    case EACCES:
    case ENOEXEC:
      return absl::PermissionDeniedError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Process>> PosixProcessLauncher::Launch(const ProcessSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return absl::InvalidArgumentError("cannot start a process: empty command");
  }
  if (spec.control_input.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot start '", spec.argv[0], "' with a control pipe: that needs a ControlPipeLauncher"));
  }
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return SpawnError(spec.argv[0], errno);
  if (pipe2(err, O_CLOEXEC) != 0) {
    int error = errno;
    close(out[0]);
    close(out[1]);
    return SpawnError(spec.argv[0], error);
  }
  SpawnArgs args(spec);
  args.Configure(spec.stdin_fd, out[1], err[1]);
  pid_t pid = -1;
  int error = args.Spawn(&pid);
  close(out[1]);
  close(err[1]);
  if (error != 0) {
    close(out[0]);
    close(err[0]);
    return SpawnError(spec.argv[0], error);
  }
  fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
  fcntl(err[0], F_SETFL, fcntl(err[0], F_GETFL) | O_NONBLOCK);
  // -1 on kernels without pidfd (before 5.3): the owner then polls TryReap().
  // Through syscall(2): glibc 2.36's <sys/pidfd.h> lacks extern "C" for C++.
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) fcntl(pidfd, F_SETFD, FD_CLOEXEC);
  return std::make_unique<PosixProcess>(pid, out[0], err[0], pidfd);
}

}  // namespace troika::agent
